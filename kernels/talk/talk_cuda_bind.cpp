// pybind11 bindings of the CUDA TaLK kernels (talk_cuda.cu). Compiled by the host compiler, so nvcc never
// sees pybind11. Device/layout checks happen in the launchers, right before each launch.
#include <torch/extension.h>

#include <vector>

namespace mrconvnext {
namespace talk {

at::Tensor talk1d_forward_cuda(const at::Tensor& x, const at::Tensor& off, int64_t max_left, int64_t max_right);
std::vector<at::Tensor> talk1d_backward_cuda(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& off,
                                             int64_t max_left, int64_t max_right, bool need_dx, bool need_doff);
std::vector<at::Tensor> talk2d_forward_cuda(const at::Tensor& x, const at::Tensor& off, int64_t max_left,
                                            int64_t max_right, int64_t max_top, int64_t max_bottom);
std::vector<at::Tensor> talk2d_backward_cuda(const at::Tensor& grad_y, const at::Tensor& P, const at::Tensor& off,
                                             int64_t max_left, int64_t max_right, int64_t max_top,
                                             int64_t max_bottom, bool need_dx, bool need_doff);

}  // namespace talk
}  // namespace mrconvnext

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace mrconvnext::talk;
  m.doc() = "TaLK convolution, CUDA kernels";
  m.def("talk1d_forward", &talk1d_forward_cuda, "TaLK 1-D forward (CUDA)", py::arg("x"), py::arg("offsets"),
        py::arg("max_left"), py::arg("max_right"));
  m.def("talk1d_backward", &talk1d_backward_cuda, "TaLK 1-D backward (CUDA)", py::arg("grad_y"), py::arg("x"),
        py::arg("offsets"), py::arg("max_left"), py::arg("max_right"), py::arg("need_dx"), py::arg("need_doff"));
  m.def("talk2d_forward", &talk2d_forward_cuda, "TaLK 2-D forward (CUDA), returns (y, integral image)",
        py::arg("x"), py::arg("offsets"), py::arg("max_left"), py::arg("max_right"), py::arg("max_top"),
        py::arg("max_bottom"));
  m.def("talk2d_backward", &talk2d_backward_cuda, "TaLK 2-D backward (CUDA)", py::arg("grad_y"), py::arg("P"),
        py::arg("offsets"), py::arg("max_left"), py::arg("max_right"), py::arg("max_top"), py::arg("max_bottom"),
        py::arg("need_dx"), py::arg("need_doff"));
}
