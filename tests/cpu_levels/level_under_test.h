// The instruction-set level the parity tests compare against baseline (main.cpp).
#pragma once

#include "dtr/kernels/cpu/cpu_level.h"

namespace dtr::test {

kernels::cpu::CpuLevel level_under_test();

}  // namespace dtr::test
