// Communication benchmark for the MPI ProcessGroup (CPU tensors, f32).
//
// 1. Bus bandwidth of all_gather_into_tensor and reduce_scatter_tensor (sum)
//    through dtr's world_group() (issue, then ->wait()) against raw MPI on the same
//    buffers: the blocking MPI_Allgather / MPI_Reduce_scatter_block on
//    MPI_COMM_WORLD ("raw"), and the non-blocking MPI_Iallgather /
//    MPI_Ireduce_scatter_block + MPI_Wait ("raw I+W": the same MPI algorithms dtr
//    runs, so dtr/(raw I+W) isolates dtr's own overhead). Sizes are totals (the
//    gathered output, the reduce-scatter input). Bus bandwidth follows nccl-tests:
//    bytes * (N-1)/N / time. Each figure is the median of --reps timed reps after
//    --warmup untimed ones; every rep starts after an MPI_Barrier and its time is
//    the slowest rank's.
// 2. Overlap: a single-threaded f32 GEMM (dtr::matmul, n x n) alone, an all-gather
//    of --overlap-mb alone, and (issue all-gather, run GEMM, wait) - through dtr
//    (the progress thread advances MPI while the GEMM runs) and, for reference,
//    through raw MPI_Iallgather + MPI_Wait (no one advances MPI during the GEMM).
//    Overlap shows as overlapped well under gemm + all-gather. With --gemm-n 0 the
//    GEMM size is picked so the GEMM takes about as long as the all-gather.
//
// Run (as root add --allow-run-as-root; with more ranks than cores add --oversubscribe):
//   OMPI_MCA_mpi_yield_when_idle=1 mpirun -np 2 build/dev/bench/dtr_comm_bench
//       [--sizes 1,4,16,64] [--reps 20] [--warmup 3] [--skip-overlap]
//       [--overlap-mb 16] [--gemm-n 0]
// DTR_MPI_PROGRESS_INTERVAL_US sets the progress thread's polling interval (default 20).
#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/cpu/parallel.h"
#include "dtr/mesh/distributed.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/matmul.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

struct Options {
  std::vector<double> sizes_mb{1, 4, 16, 64};
  int reps = 20;
  int warmup = 3;
  bool skip_overlap = false;
  double overlap_mb = 16;
  int64_t gemm_n = 0;  // 0: pick
};

int g_rank = 0;
int g_size = 1;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// For each function, the median over `reps` of the slowest rank's time, after
// `warmup` untimed runs of each. The functions run in turns within each rep (so a
// change in machine load hits all of them alike); each run starts after a barrier.
// Collective: every rank calls this with the same arguments.
std::vector<double> median_times(int warmup, int reps, const std::vector<std::function<void()>>& fns) {
  for (int i = 0; i < warmup; ++i) {
    for (const auto& fn : fns) fn();
  }
  const size_t n = fns.size();
  std::vector<double> times(n * static_cast<size_t>(reps));  // [rep][fn]
  for (size_t rep = 0; rep < static_cast<size_t>(reps); ++rep) {
    for (size_t f = 0; f < n; ++f) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = now_s();
      fns[f]();
      times[rep * n + f] = now_s() - start;
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, times.data(), static_cast<int>(times.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  std::vector<double> medians;
  for (size_t f = 0; f < n; ++f) {
    std::vector<double> t;
    for (size_t rep = 0; rep < static_cast<size_t>(reps); ++rep) t.push_back(times[rep * n + f]);
    std::sort(t.begin(), t.end());
    medians.push_back(reps % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]));
  }
  return medians;
}

double bus_gbps(double bytes, double seconds) {
  return bytes * (g_size - 1) / g_size / seconds * 1e-9;
}

std::string mb_label(double bytes) { return fmt::format("{:g} MB", bytes / (1 << 20)); }

// f32 elements of a total of `mb` MiB, rounded down to a multiple of the world size.
int64_t total_elements(double mb) {
  const auto n = static_cast<int64_t>(mb * (1 << 20) / sizeof(float));
  return std::max<int64_t>(g_size, n / g_size * g_size);
}

void print_header(const char* op) {
  if (g_rank != 0) return;
  fmt::print("\n{} (f32, {} ranks; median of reps, slowest rank; bus GB/s = bytes*(N-1)/N/time;\n"
             "ratios are of bandwidth, > 100% = dtr faster; CPU kernels {})\n",
             op, g_size, dtr::kernels::cpu::cpu_level_description());
  fmt::print("{:>8} | {:>10} | {:>10} | {:>10} | {:>8} | {:>8} | {:>8} | {:>8} | {:>9}\n", "size", "dtr ms",
             "raw ms", "raw I+W ms", "dtr GB/s", "raw GB/s", "I+W GB/s", "dtr/raw", "dtr/(I+W)");
  fmt::print("{:->8}-+-{:->10}-+-{:->10}-+-{:->10}-+-{:->8}-+-{:->8}-+-{:->8}-+-{:->8}-+-{:->9}\n", "", "", "", "",
             "", "", "", "", "");
}

void print_row(double bytes, double dtr_s, double raw_s, double nb_s) {
  if (g_rank != 0) return;
  fmt::print("{:>8} | {:>10.3f} | {:>10.3f} | {:>10.3f} | {:>8.2f} | {:>8.2f} | {:>8.2f} | {:>7.1f}% | {:>8.1f}%{}\n",
             mb_label(bytes), dtr_s * 1e3, raw_s * 1e3, nb_s * 1e3, bus_gbps(bytes, dtr_s), bus_gbps(bytes, raw_s),
             bus_gbps(bytes, nb_s), 100 * raw_s / dtr_s, 100 * nb_s / dtr_s, raw_s / dtr_s < 0.95 ? "  < 95%" : "");
}

// Rank r's input holds r + i/n, so the gathered output is checkable.
dtr::Tensor rank_input(int64_t n) {
  dtr::Tensor t = dtr::empty({n});
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(g_rank) + static_cast<float>(i % 1024) / 1024.0f;
  return t;
}

void check(bool ok, const std::string& what) {
  int all_ok = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_ok) {
    if (g_rank == 0) fmt::print(stderr, "comm_bench: wrong result: {}\n", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

void bench_all_gather(const Options& opt, const dtr::mesh::ProcessGroupPtr& pg) {
  print_header("all_gather_into_tensor vs MPI_Allgather");
  for (double mb : opt.sizes_mb) {
    const int64_t total = total_elements(mb), chunk = total / g_size;
    const dtr::Tensor in = rank_input(chunk);
    const dtr::Tensor out = dtr::empty({total});
    float* send = in.data<float>();
    float* recv = out.data<float>();
    const int count = static_cast<int>(chunk);

    pg->all_gather_into_tensor(out, in)->wait();
    bool ok = true;
    for (int r = 0; r < g_size; ++r) ok = ok && recv[r * chunk + chunk - 1] == send[chunk - 1] - g_rank + r;
    check(ok, "all_gather_into_tensor");

    const std::vector<double> t = median_times(
        opt.warmup, opt.reps,
        {[&] { pg->all_gather_into_tensor(out, in)->wait(); },
         [&] { MPI_Allgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD); },
         [&] {
           MPI_Request req;
           MPI_Iallgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD, &req);
           MPI_Wait(&req, MPI_STATUS_IGNORE);
         }});
    print_row(static_cast<double>(total) * sizeof(float), t[0], t[1], t[2]);
  }
}

void bench_reduce_scatter(const Options& opt, const dtr::mesh::ProcessGroupPtr& pg) {
  print_header("reduce_scatter_tensor (sum) vs MPI_Reduce_scatter_block");
  for (double mb : opt.sizes_mb) {
    const int64_t total = total_elements(mb), chunk = total / g_size;
    const dtr::Tensor in = rank_input(total);
    const dtr::Tensor out = dtr::empty({chunk});
    float* send = in.data<float>();
    float* recv = out.data<float>();
    const int count = static_cast<int>(chunk);

    pg->reduce_scatter_tensor(out, in)->wait();
    // Element i of the sum is sum_r (r + f_i) = N(N-1)/2 + N f_i, with f_i = (i % 1024) / 1024.
    const int64_t i = g_rank * chunk + chunk - 1;
    const float expect = static_cast<float>(g_size * (g_size - 1) / 2) +
                         static_cast<float>(g_size) * static_cast<float>(i % 1024) / 1024.0f;
    check(recv[chunk - 1] == expect, "reduce_scatter_tensor");

    const std::vector<double> t = median_times(
        opt.warmup, opt.reps,
        {[&] { pg->reduce_scatter_tensor(out, in)->wait(); },
         [&] { MPI_Reduce_scatter_block(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
         [&] {
           MPI_Request req;
           MPI_Ireduce_scatter_block(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
           MPI_Wait(&req, MPI_STATUS_IGNORE);
         }});
    print_row(static_cast<double>(total) * sizeof(float), t[0], t[1], t[2]);
  }
}

void bench_overlap(const Options& opt, const dtr::mesh::ProcessGroupPtr& pg) {
  dtr::kernels::set_num_threads(1);
  const int64_t total = total_elements(opt.overlap_mb), chunk = total / g_size;
  const dtr::Tensor in = rank_input(chunk);
  const dtr::Tensor out = dtr::empty({total});
  const int count = static_cast<int>(chunk);
  auto dtr_all_gather = [&] { pg->all_gather_into_tensor(out, in)->wait(); };
  auto raw_all_gather = [&] {
    MPI_Request req;
    MPI_Iallgather(in.data<float>(), count, MPI_FLOAT, out.data<float>(), count, MPI_FLOAT, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  };

  // The GEMM: the given size, or the candidate whose time is closest to the all-gather's.
  int64_t n = opt.gemm_n;
  dtr::Tensor a, b, c;
  auto gemm = [&] { c = dtr::matmul(a, b); };
  auto make = [&](int64_t size) {
    a = dtr::ones({size, size});
    b = dtr::ones({size, size});
  };
  if (n <= 0) {
    const double ag_s = median_times(1, 5, {dtr_all_gather})[0];
    double best_gap = 1e30;
    for (int64_t cand : {128, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536}) {
      make(cand);
      const double gap = std::abs(median_times(1, 3, {gemm})[0] - ag_s);
      if (gap < best_gap) best_gap = gap, n = cand;
    }
  }
  make(n);
  const std::vector<double> t = median_times(opt.warmup, opt.reps,
                                             {gemm, dtr_all_gather,
                                              [&] {
                                                auto work = pg->all_gather_into_tensor(out, in);
                                                gemm();
                                                work->wait();
                                              },
                                              raw_all_gather,
                                              [&] {
                                                MPI_Request req;
                                                MPI_Iallgather(in.data<float>(), count, MPI_FLOAT, out.data<float>(),
                                                               count, MPI_FLOAT, MPI_COMM_WORLD, &req);
                                                gemm();
                                                MPI_Wait(&req, MPI_STATUS_IGNORE);
                                              }});
  check(c.data<float>()[0] == static_cast<float>(n), "matmul");
  const double gemm_s = t[0], ag_s = t[1], dtr_both_s = t[2], raw_ag_s = t[3], raw_both_s = t[4];

  if (g_rank != 0) return;
  const char* interval = std::getenv("DTR_MPI_PROGRESS_INTERVAL_US");
  fmt::print("\nOverlap ({} ranks): all-gather of {} total with a single-threaded f32 GEMM {} x {}; "
             "progress interval {} us\n",
             g_size, mb_label(static_cast<double>(total) * sizeof(float)), n, n, interval ? interval : "20 (default)");
  fmt::print("{:>22} | {:>9} | {:>13} | {:>15} | {:>14} | {:>12}\n", "", "GEMM ms", "all-gather ms",
             "overlapped ms", "GEMM + AG ms", "overlapped /");
  fmt::print("{:>22} | {:>9} | {:>13} | {:>15} | {:>14} | {:>12}\n", "", "", "", "", "", "(GEMM + AG)");
  fmt::print("{:->22}-+-{:->9}-+-{:->13}-+-{:->15}-+-{:->14}-+-{:->12}\n", "", "", "", "", "", "");
  auto row = [&](const char* what, double ag, double both) {
    fmt::print("{:>22} | {:>9.3f} | {:>13.3f} | {:>15.3f} | {:>14.3f} | {:>11.1f}%\n", what, gemm_s * 1e3, ag * 1e3,
               both * 1e3, (gemm_s + ag) * 1e3, 100 * both / (gemm_s + ag));
  };
  row("dtr (progress thread)", ag_s, dtr_both_s);
  row("raw MPI_Iallgather+Wait", raw_ag_s, raw_both_s);
  fmt::print("(100% = no overlap; 100 * max/sum % = perfect overlap: {:.1f}%)\n",
             100 * std::max(gemm_s, ag_s) / (gemm_s + ag_s));
}

}  // namespace

int main(int argc, char** argv) {
  dtr::distributed::init();
  g_rank = dtr::distributed::rank();
  g_size = dtr::distributed::world_size();

  Options opt;
  CLI::App app{"dtr communication benchmark: all-gather / reduce-scatter bandwidth against raw MPI, and overlap"};
  app.add_option("--sizes", opt.sizes_mb, "total sizes in MB (MiB), comma separated")->delimiter(',');
  app.add_option("--reps", opt.reps, "timed repetitions (the median is reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", opt.warmup, "untimed warm-up repetitions")->check(CLI::NonNegativeNumber);
  app.add_flag("--skip-overlap", opt.skip_overlap, "skip the overlap part");
  app.add_option("--overlap-mb", opt.overlap_mb, "total all-gather size for the overlap part, in MB");
  app.add_option("--gemm-n", opt.gemm_n, "GEMM size for the overlap part (0: about as long as the all-gather)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = 0;
    if (g_rank == 0) {
      code = app.exit(e);
    } else {
      code = e.get_exit_code();
    }
    dtr::distributed::finalize();
    return code;
  }

  const auto pg = dtr::distributed::world_group();
  if (g_rank == 0) {
    fmt::print("dtr comm bench: {} ranks, backend {}, {} warm-up + {} timed reps\n", g_size, pg->backend(),
               opt.warmup, opt.reps);
  }
  if (g_size < 2 && g_rank == 0) fmt::print("(1 rank: bus bandwidth is 0 by definition; run under mpirun -np N)\n");
  bench_all_gather(opt, pg);
  bench_reduce_scatter(opt, pg);
  if (!opt.skip_overlap) bench_overlap(opt, pg);
  dtr::distributed::finalize();
  return 0;
}
