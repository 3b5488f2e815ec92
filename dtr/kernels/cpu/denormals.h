// Flush-to-zero of subnormal floats on the CPU, opt in, as torch.set_flush_denormal:
// with it on, results below the smallest normal number become 0 and subnormal
// inputs are read as 0 (x86 FTZ and DAZ; aarch64 FZ), which spares the slow path
// some CPUs take for subnormal operands. Off by default (IEEE results).
//
// The mode is a per-thread CPU setting: set_flush_denormal() sets it on the calling
// thread at once, and every task of the kernel thread pool (parallel.h) sets its
// worker's mode to match before it runs. Other threads of the program keep theirs.
#pragma once

namespace dtr::kernels {

// Turns flushing on or off. Returns false, changing nothing, where the CPU has no
// such mode (architectures other than x86-64 and aarch64).
bool set_flush_denormal(bool on);

// Whether set_flush_denormal(true) is in force.
bool flush_denormal();

// Gives the calling thread the mode set_flush_denormal() chose (parallel.cpp calls
// it in each pool task).
void apply_flush_denormal_mode();

}  // namespace dtr::kernels
