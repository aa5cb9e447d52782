// The soft-capped attention kernels of the training step (Gemma 2; the `_cap` entry points):
// focus_train.cu's attention with its CAP template parameter on, as a module of their own, so
// that the driver JIT-compiles them (about as long as the whole of focus_train.cu) only for a
// model that soft-caps. The host side picks the module by the kernel's name
// (crates/train/src/train/device.rs).
#define FOCUS_TRAIN_CAP
#include "focus_train.cu"
