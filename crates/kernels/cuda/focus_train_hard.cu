// The straight-through attention kernels of the training step (GATE_HARD: the hard top-k mask
// forward, the log gate's gradient backward; the `_hard` entry points, soft-capped or not):
// focus_train.cu's attention as a module of its own, so that the driver JIT-compiles them only
// for a straight-through run. The host side picks the module by the kernel's name
// (crates/train/src/train/device.rs).
#define FOCUS_TRAIN_HARD
#include "focus_train.cu"
