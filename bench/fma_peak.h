// The machine's f32 multiply-add peak, measured: every thread runs independent chains
// of vector FMAs (multiply, then add at the baseline level, which has no FMA) in
// registers at the width of dtr's active CPU level, so the figure is the limit that
// level's GEMM can reach on this machine, clock and cores as they are.
#pragma once

namespace dtr::bench {

// GFLOP/s (2 per multiply-add) of `threads` threads running at once, best of a few runs.
double measured_fma_peak_gflops(int threads);

// The same for AVX-512 BF16's dot product (vdpbf16ps: 32 bf16 multiply-adds into 16
// f32 sums per instruction), the instruction a bf16 GEMM would be built on; 0 when
// the CPU does not have it.
double measured_bf16_dot_peak_gflops(int threads);

// The CPU's model name as /proc/cpuinfo gives it, or "unknown CPU".
const char* cpu_model_name();

}  // namespace dtr::bench
