"""torch.hub entrypoints: ``torch.hub.load('<repo or checkout>', 'mrconvnext_t', source=...)``.

Every registered model of the package is an entrypoint; keyword arguments go to
``timm.create_model`` (e.g. ``num_classes=10``, ``kernel_type='fourier'``, ``deploy=True``).
"""

dependencies = ['torch', 'timm', 'safetensors']

import timm as _timm  # noqa: E402

import mrconvnext as _mrconvnext  # noqa: E402  (importing registers the models)


def _entrypoint(name: str):
    def create(pretrained: bool = False, **kwargs):
        return _timm.create_model(name, pretrained=pretrained, **kwargs)

    create.__name__ = name
    create.__doc__ = f'timm.create_model({name!r}, pretrained=pretrained, **kwargs)'
    return create


for _name in _mrconvnext.models.list_models():
    globals()[_name] = _entrypoint(_name)
del _name
