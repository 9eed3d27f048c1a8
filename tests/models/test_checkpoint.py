"""The one checkpoint reader (mrconvnext.models.read_state_dict) and the loaders built on it: a matrix of bad files,
each a FileNotFoundError / ValueError naming the file and the problem, and the documented EMA rule."""

import pytest
import timm
import torch
from safetensors.torch import save_file

import mrconvnext
from mrconvnext.models import read_state_dict
from mrconvnext.tools.common import load_weights


class _Evil:
    def __reduce__(self):
        return (print, ('unpickled!',))


def _write(tmp_path, kind):
    sd = timm.create_model('mrconvnext_atto', num_classes=3).state_dict()
    if kind == 'missing':
        return tmp_path / 'missing.pth', FileNotFoundError, 'no checkpoint file'
    if kind == 'directory':
        (tmp_path / 'dir.pth').mkdir()
        return tmp_path / 'dir.pth', ValueError, 'not a file'
    if kind == 'empty':
        (p := tmp_path / 'empty.pth').write_bytes(b'')
        return p, ValueError, 'is empty'
    if kind == 'truncated':
        torch.save(sd, p := tmp_path / 'truncated.pth')
        p.write_bytes(p.read_bytes()[:2000])
        return p, ValueError, 'could not read'
    if kind == 'random_bytes':
        (p := tmp_path / 'random.pth').write_bytes(torch.randint(0, 256, (4096,), dtype=torch.uint8).numpy().tobytes())
        return p, ValueError, 'could not read'
    if kind == 'pickled_object':
        torch.save({'x': _Evil()}, p := tmp_path / 'evil.pth')
        return p, ValueError, 'could not read'
    if kind == 'safetensors_garbage':
        (p := tmp_path / 'garbage.safetensors').write_bytes(b'\x10\x00\x00\x00\x00\x00\x00\x00{"a": garbage}')
        return p, ValueError, 'safetensors'
    if kind == 'safetensors_truncated':
        save_file(sd, p := tmp_path / 'cut.safetensors')
        p.write_bytes(p.read_bytes()[:3000])
        return p, ValueError, 'safetensors'
    if kind == 'not_a_dict':
        torch.save(torch.zeros(3), p := tmp_path / 'tensor.pth')
        return p, ValueError, 'not a state dict'
    if kind == 'non_tensor_values':
        torch.save({'epoch': 3, 'arch': 'x', 'w': torch.zeros(1)}, p := tmp_path / 'meta.pth')
        return p, ValueError, 'not a state dict of tensors'
    if kind == 'wrong_model_size':
        torch.save(timm.create_model('mrconvnext_femto', num_classes=3).state_dict(), p := tmp_path / 'femto.pth')
        return p, ValueError, 'does not fit'
    raise AssertionError(kind)


KINDS = [
    'missing',
    'directory',
    'empty',
    'truncated',
    'random_bytes',
    'pickled_object',
    'safetensors_garbage',
    'safetensors_truncated',
    'not_a_dict',
    'non_tensor_values',
    'wrong_model_size',
]


@pytest.mark.parametrize('kind', KINDS)
def test_bad_checkpoint_matrix(tmp_path, kind, capsys):
    path, err, match = _write(tmp_path, kind)
    model = timm.create_model('mrconvnext_atto', num_classes=3)
    with pytest.raises(err, match=match) as info:
        load_weights(model, path)
    assert path.name in str(info.value)
    if kind != 'wrong_model_size':  # the warm start reads through the same reader
        with pytest.raises(err, match=match):
            mrconvnext.load_convnext_weights(model, path)
    assert 'unpickled!' not in capsys.readouterr().out


def test_ema_rule(tmp_path):
    model = timm.create_model('mrconvnext_atto', num_classes=3)
    sd = model.state_dict()
    ema = {k: v + 1 if v.is_floating_point() else v for k, v in sd.items()}
    path = tmp_path / 'ckpt.pth.tar'
    torch.save({'epoch': 2, 'state_dict_ema': ema, 'state_dict': sd}, path)
    got, key = read_state_dict(path)
    assert key == 'state_dict' and all(torch.equal(got[k], sd[k]) for k in sd)  # trained weights by default
    got, key = read_state_dict(path, use_ema=True)
    assert key == 'state_dict_ema' and all(torch.equal(got[k], ema[k]) for k in sd)
    torch.save({'state_dict': sd}, path)
    with pytest.raises(ValueError, match='no EMA weights'):
        read_state_dict(path, use_ema=True)
    # DDP prefixes are cleaned; a bare state dict is taken as it is
    torch.save({f'module.{k}': v for k, v in sd.items()}, path)
    got, key = read_state_dict(path)
    assert key == '' and set(got) == set(sd)
    assert load_weights(model, path) == ''


def test_mapping_with_non_tensor_values():
    with pytest.raises(ValueError, match="'epoch': int"):
        read_state_dict({'epoch': 1})
    with pytest.raises(TypeError, match='path or a state dict'):
        read_state_dict(42)
