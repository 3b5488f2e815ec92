// Ops on DTensors (dtr/dtensor/dtensor_ops.h) at world sizes 1-4 and on a 2x2 mesh at
// 4: for every op and many input placements (uneven and empty shards included),
// the full result and the full gradients equal the same local op on the full
// tensors in this process; the placements the rules promise; the rule cache;
// mixing meshes is a clear error.
#include "dtr/dtensor/dtensor_ops.h"
#include "dtr/dtensor/sharding/rule_cache.h"
#include "tests/support/dtensor_op_check.h"
#include "dtr/tensor/ops/matmul.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/ops/softmax.h"

using namespace dtr;
using namespace dtr::testing;
using dtr::mesh::DeviceMesh;
using dtr::mesh::init_device_mesh;

namespace {

std::vector<DeviceMesh> test_meshes() {
  std::vector<DeviceMesh> meshes = {init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"tp"})};
  if (distributed::world_size() == 4) meshes.push_back(init_device_mesh(DeviceType::cpu, {2, 2}, {"dp", "tp"}));
  return meshes;
}

std::vector<Placements> placements_for(const DeviceMesh& mesh, int64_t ndim, bool partial = true) {
  return mesh.ndim() == 1 ? placements_1d(ndim, partial) : placements_2d(ndim, partial);
}

using Unary = std::function<DTensor(const DTensor&)>;
using LocalUnary = std::function<Tensor(const Tensor&)>;

void check_unary(const DeviceMesh& mesh, const Shape& shape, const Unary& f, const LocalUnary& g, bool positive = false) {
  Tensor full = random_full(shape, 11);
  if (positive) full = add(dtr::abs(full), Scalar(0.5));
  for (const auto& p : placements_for(mesh, static_cast<int64_t>(shape.size()))) {
    INFO("placements " << to_string(p));
    check_op(mesh, {{full, p}}, [&](const auto& x) { return f(x[0]); }, [&](const auto& x) { return g(x[0]); });
  }
}

using Binary = std::function<DTensor(const DTensor&, const DTensor&)>;
using LocalBinary = std::function<Tensor(const Tensor&, const Tensor&)>;

void check_binary(const DeviceMesh& mesh, const Shape& sa, const Shape& sb, const Binary& f, const LocalBinary& g,
                  bool positive_b = false) {
  Tensor a = random_full(sa, 21);
  Tensor b = random_full(sb, 22);
  if (positive_b) b = add(dtr::abs(b), Scalar(0.5));
  for (const auto& pa : placements_for(mesh, static_cast<int64_t>(sa.size()))) {
    for (const auto& pb : placements_for(mesh, static_cast<int64_t>(sb.size()))) {
      INFO(shape_str(sa) << " " << to_string(pa) << " with " << shape_str(sb) << " " << to_string(pb));
      check_op(
          mesh, {{a, pa}, {b, pb}}, [&](const auto& x) { return f(x[0], x[1]); },
          [&](const auto& x) { return g(x[0], x[1]); });
    }
  }
}

}  // namespace

TEST_CASE("dtensor ops: unary and scalar ops match the full tensor in values and gradients") {
  for (const auto& mesh : test_meshes()) {
    for (const Shape& shape : {Shape{7, 5}, Shape{2, 3}}) {
      check_unary(mesh, shape, [](const DTensor& x) { return dtensor::relu(x); }, [](const Tensor& x) { return relu(x); });
      check_unary(mesh, shape, [](const DTensor& x) { return dtensor::gelu(x); }, [](const Tensor& x) { return gelu(x); });
      check_unary(mesh, shape, [](const DTensor& x) { return dtensor::neg(x); }, [](const Tensor& x) { return neg(x); });
      check_unary(mesh, shape, [](const DTensor& x) { return dtensor::silu(x); }, [](const Tensor& x) { return silu(x); });
      check_unary(mesh, shape, [](const DTensor& x) { return dtensor::exp(x); }, [](const Tensor& x) { return exp(x); });
      check_unary(mesh, shape, [](const DTensor& x) { return dtensor::tanh(x); }, [](const Tensor& x) { return tanh(x); });
      check_unary(
          mesh, shape, [](const DTensor& x) { return dtensor::sqrt(x); }, [](const Tensor& x) { return sqrt(x); }, true);
      check_unary(
          mesh, shape, [](const DTensor& x) { return dtensor::mul(x, 2.5); }, [](const Tensor& x) { return mul(x, 2.5); });
      check_unary(
          mesh, shape, [](const DTensor& x) { return dtensor::add(x, 1.5); }, [](const Tensor& x) { return add(x, 1.5); });
      check_unary(
          mesh, shape, [](const DTensor& x) { return dtensor::div(x, 4.0); }, [](const Tensor& x) { return div(x, 4.0); });
      check_unary(
          mesh, shape, [](const DTensor& x) { return dtensor::pow(x, 2.0); }, [](const Tensor& x) { return pow(x, 2.0); });
    }
  }
}

TEST_CASE("dtensor ops: linear ops keep Partial, non-linear ones reduce it first") {
  auto mesh = test_meshes()[0];
  DTensor x = distribute_tensor(random_full({4, 3}, 1), mesh, {Partial()});
  REQUIRE(dtensor::neg(x).placements() == Placements{Partial()});
  REQUIRE(dtensor::mul(x, 3.0).placements() == Placements{Partial()});
  REQUIRE(dtensor::to(x, DType::f32).placements() == Placements{Partial()});
  REQUIRE(dtensor::relu(x).placements() == Placements{Replicate()});
  REQUIRE(dtensor::add(x, 1.0).placements() == Placements{Replicate()});
  REQUIRE(dtensor::add(x, x).placements() == Placements{Partial()});
  DTensor r = distribute_tensor(random_full({4, 3}, 2), mesh, {Replicate()});
  REQUIRE(dtensor::mul(x, r).placements() == Placements{Partial()});
  REQUIRE(dtensor::mul(r, x).placements() == Placements{Partial()});
  REQUIRE(dtensor::add(x, r).placements() == Placements{Replicate()});
}

TEST_CASE("dtensor ops: binary ops, same shape and broadcast, match the full tensor") {
  for (const auto& mesh : test_meshes()) {
    auto add_d = [](const DTensor& a, const DTensor& b) { return dtensor::add(a, b); };
    auto add_l = [](const Tensor& a, const Tensor& b) { return add(a, b); };
    auto mul_d = [](const DTensor& a, const DTensor& b) { return dtensor::mul(a, b); };
    auto mul_l = [](const Tensor& a, const Tensor& b) { return mul(a, b); };
    check_binary(mesh, {7, 5}, {7, 5}, add_d, add_l);
    check_binary(mesh, {7, 5}, {7, 5}, mul_d, mul_l);
    check_binary(
        mesh, {7, 5}, {7, 5}, [](const DTensor& a, const DTensor& b) { return dtensor::sub(a, b); },
        [](const Tensor& a, const Tensor& b) { return sub(a, b); });
    check_binary(
        mesh, {7, 5}, {7, 5}, [](const DTensor& a, const DTensor& b) { return dtensor::div(a, b); },
        [](const Tensor& a, const Tensor& b) { return div(a, b); }, true);
    check_binary(
        mesh, {7, 5}, {7, 5}, [](const DTensor& a, const DTensor& b) { return dtensor::maximum(a, b); },
        [](const Tensor& a, const Tensor& b) { return maximum(a, b); });
    check_binary(mesh, {7, 5}, {5}, add_d, add_l);     // a bias
    check_binary(mesh, {7, 5}, {7, 1}, mul_d, mul_l);  // a per-row scale
    check_binary(mesh, {5}, {3, 5}, add_d, add_l);     // the first operand broadcast
    check_binary(mesh, {2, 3}, {2, 3}, mul_d, mul_l);  // empty shards at 3 and 4 ranks
  }
}

TEST_CASE("dtensor ops: a sharded operand shards the result and a Replicate bias gets its full gradient") {
  auto mesh = test_meshes()[0];
  DTensor x = distribute_tensor(random_full({7, 5}, 1), mesh, {Shard(0)});
  DTensor b = distribute_tensor(random_full({5}, 2), mesh, {Replicate()});
  REQUIRE(dtensor::add(x, b).placements() == Placements{Shard(0)});
  DTensor y = distribute_tensor(random_full({7, 5}, 3), mesh, {Shard(1)});
  REQUIRE(dtensor::add(x, y).placements() == Placements{Shard(0)});
  REQUIRE(dtensor::add(y, x).placements() == Placements{Shard(1)});
}

TEST_CASE("dtensor ops: cast keeps placements and matches Tensor::to") {
  for (const auto& mesh : test_meshes()) {
    Tensor full = random_full({7, 5}, 5);
    for (const auto& p : placements_for(mesh, 2)) {
      INFO(to_string(p));
      DTensor out = check_op(
          mesh, {{full, p}}, [](const auto& x) { return dtensor::to(x[0], DType::f32); },
          [](const auto& x) { return x[0].to(DType::f32); }, 1e-6);
      REQUIRE(out.dtype() == DType::f32);
      REQUIRE(out.placements() == p);
    }
  }
}

TEST_CASE("dtensor ops: matmul follows the matmul rules and matches the full tensor") {
  const auto mesh = test_meshes()[0];
  Tensor a = random_full({7, 6}, 31), b = random_full({6, 5}, 32);
  auto mm_d = [](const auto& x) { return dtensor::matmul(x[0], x[1]); };
  auto mm_l = [](const auto& x) { return matmul(x[0], x[1]); };
  REQUIRE(check_op(mesh, {{a, {Shard(0)}}, {b, {Replicate()}}}, mm_d, mm_l).placements() == Placements{Shard(0)});
  REQUIRE(check_op(mesh, {{a, {Replicate()}}, {b, {Shard(1)}}}, mm_d, mm_l).placements() == Placements{Shard(1)});
  REQUIRE(check_op(mesh, {{a, {Shard(1)}}, {b, {Shard(0)}}}, mm_d, mm_l).placements() == Placements{Partial()});
  REQUIRE(check_op(mesh, {{a, {Replicate()}}, {b, {Replicate()}}}, mm_d, mm_l).placements() ==
          Placements{Replicate()});
  for (const auto& m : test_meshes()) {
    for (const auto& pa : placements_for(m, 2)) {
      for (const auto& pb : placements_for(m, 2)) {
        INFO(to_string(pa) << " . " << to_string(pb));
        check_op(m, {{a, pa}, {b, pb}}, mm_d, mm_l);
      }
    }
    // batched activations . 2-D weight, equal-batch bmm, and the unsupported 1-D case (replicated)
    Tensor a3 = random_full({3, 4, 6}, 33), b3 = random_full({3, 6, 2}, 34), v = random_full({6}, 35);
    for (const auto& pa : placements_for(m, 3)) {
      INFO(to_string(pa));
      check_op(m, {{a3, pa}, {b, placements_for(m, 2)[1]}}, mm_d, mm_l);
      for (const auto& pb : placements_for(m, 3)) check_op(m, {{a3, pa}, {b3, pb}}, mm_d, mm_l);
    }
    for (const auto& pv : placements_for(m, 1)) {
      DTensor out = check_op(m, {{v, pv}, {b, placements_for(m, 2)[1]}}, mm_d, mm_l);
      REQUIRE(out.spec().is_replicated());
    }
  }
}

TEST_CASE("dtensor ops: linear with and without bias matches the full tensor") {
  Tensor x = random_full({7, 6}, 41), x3 = random_full({2, 3, 6}, 42);
  Tensor w = random_full({5, 6}, 43), bias = random_full({5}, 44);
  for (const auto& mesh : test_meshes()) {
    for (const auto& pw : placements_for(mesh, 2)) {
      for (const auto& px : placements_for(mesh, 2)) {
        INFO(to_string(px) << " weight " << to_string(pw));
        for (const auto& pb : placements_for(mesh, 1, false)) {
          check_op(
              mesh, {{x, px}, {w, pw}, {bias, pb}}, [](const auto& t) { return dtensor::linear(t[0], t[1], t[2]); },
              [](const auto& t) { return linear(t[0], t[1], t[2]); });
        }
        check_op(
            mesh, {{x, px}, {w, pw}}, [](const auto& t) { return dtensor::linear(t[0], t[1]); },
            [](const auto& t) { return linear(t[0], t[1]); });
      }
      for (const auto& px : placements_for(mesh, 3)) {
        check_op(
            mesh, {{x3, px}, {w, pw}, {bias, placements_for(mesh, 1, false)[0]}},
            [](const auto& t) { return dtensor::linear(t[0], t[1], t[2]); },
            [](const auto& t) { return linear(t[0], t[1], t[2]); });
      }
    }
  }
  const auto mesh = test_meshes()[0];
  DTensor dx = distribute_tensor(x, mesh, {Replicate()});
  REQUIRE(dtensor::linear(dx, distribute_tensor(w, mesh, {Shard(0)})).placements() == Placements{Shard(1)});
  REQUIRE(dtensor::linear(distribute_tensor(x, mesh, {Shard(1)}), distribute_tensor(w, mesh, {Shard(1)}),
                       distribute_tensor(bias, mesh, {Replicate()}))
              .placements() == Placements{Partial()});
}

TEST_CASE("dtensor ops: sum and mean over sharded and unsharded dims") {
  Tensor x = random_full({7, 5}, 51), x3 = random_full({3, 7, 2}, 52);
  for (const auto& mesh : test_meshes()) {
    for (const auto& p : placements_for(mesh, 2)) {
      for (const auto& dims : {std::vector<int64_t>{0}, std::vector<int64_t>{1}, std::vector<int64_t>{},
                               std::vector<int64_t>{-1, 0}}) {
        for (bool keepdim : {false, true}) {
          INFO(to_string(p) << " dims " << dims.size() << " keepdim " << keepdim);
          check_op(
              mesh, {{x, p}}, [&](const auto& t) { return dtensor::sum(t[0], dims, keepdim); },
              [&](const auto& t) { return sum(t[0], dims, keepdim); });
          check_op(
              mesh, {{x, p}}, [&](const auto& t) { return dtensor::mean(t[0], dims, keepdim); },
              [&](const auto& t) { return mean(t[0], dims, keepdim); });
        }
      }
    }
    for (const auto& p : placements_for(mesh, 3)) {
      check_op(
          mesh, {{x3, p}}, [](const auto& t) { return dtensor::mean(t[0], {1}); },
          [](const auto& t) { return mean(t[0], {1}); });
    }
  }
  const auto mesh = test_meshes()[0];
  DTensor s0 = distribute_tensor(x, mesh, {Shard(0)});
  REQUIRE(dtensor::sum(s0, {0}).placements() == Placements{Partial()});
  REQUIRE(dtensor::sum(s0, {1}).placements() == Placements{Shard(0)});
  REQUIRE(dtensor::sum(distribute_tensor(x3, mesh, {Shard(2)}), {1}).placements() == Placements{Shard(1)});
}

TEST_CASE("dtensor ops: softmax, log_softmax, layer_norm and rms_norm over an unsharded last dim") {
  Tensor x = random_full({7, 6}, 61), x3 = random_full({2, 3, 6}, 62);
  Tensor w = random_full({6}, 63), b = random_full({6}, 64);
  for (const auto& mesh : test_meshes()) {
    for (const Tensor& full : {x, x3}) {
      for (const auto& p : placements_for(mesh, full.dim())) {
        INFO(shape_str(full.sizes()) << " " << to_string(p));
        for (int64_t dim : {int64_t{-1}, int64_t{0}}) {
          check_op(
              mesh, {{full, p}}, [&](const auto& t) { return dtensor::softmax(t[0], dim); },
              [&](const auto& t) { return softmax(t[0], dim); });
          check_op(
              mesh, {{full, p}}, [&](const auto& t) { return dtensor::log_softmax(t[0], dim); },
              [&](const auto& t) { return log_softmax(t[0], dim); });
        }
        for (const auto& pw : placements_for(mesh, 1, false)) {
          check_op(
              mesh, {{full, p}, {w, pw}, {b, pw}}, [](const auto& t) { return dtensor::layer_norm(t[0], t[1], t[2]); },
              [](const auto& t) { return layer_norm(t[0], 6, t[1], t[2]); }, 1e-9);
          check_op(
              mesh, {{full, p}, {w, pw}}, [](const auto& t) { return dtensor::rms_norm(t[0], t[1]); },
              [](const auto& t) { return rms_norm(t[0], t[1]); }, 1e-9);
        }
        check_op(
            mesh, {{full, p}}, [](const auto& t) { return dtensor::layer_norm(t[0]); },
            [](const auto& t) { return layer_norm(t[0], 6); }, 1e-9);
      }
    }
  }
  const auto mesh = test_meshes()[0];
  REQUIRE(dtensor::layer_norm(distribute_tensor(x, mesh, {Shard(0)})).placements() == Placements{Shard(0)});
  REQUIRE(dtensor::softmax(distribute_tensor(x, mesh, {Shard(1)})).placements() == Placements{Replicate()});
}

TEST_CASE("dtensor ops: embedding with a row-sharded, column-sharded or replicated table") {
  for (const Shape& table_shape : {Shape{7, 4}, Shape{2, 3}}) {
    const int64_t vocab = table_shape[0];
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 10; ++i) ids.push_back((i * 5 + 3) % vocab);
    Tensor indices = from_vector<int64_t>(ids, {2, 5});
    Tensor table = random_full(table_shape, 71);
    for (const auto& mesh : test_meshes()) {
      for (const auto& pt : placements_for(mesh, 2)) {
        for (const auto& pi : placements_for(mesh, 2, false)) {
          INFO("table " << shape_str(table_shape) << " " << to_string(pt) << " indices " << to_string(pi));
          check_op(
              mesh, {{table, pt}, {indices, pi, false}}, [](const auto& t) { return dtensor::embedding(t[0], t[1]); },
              [](const auto& t) { return embedding(t[0], t[1]); });
        }
      }
    }
  }
  auto mesh = test_meshes()[0];
  DTensor t = distribute_tensor(random_full({7, 4}, 1), mesh, {Shard(0)});
  DTensor idx = distribute_tensor(from_vector<int64_t>({0, 6, 3}, {3}), mesh, {Replicate()});
  REQUIRE(dtensor::embedding(t, idx).placements() == Placements{Partial()});
  DTensor bad = distribute_tensor(from_vector<int64_t>({0, 7, 3}, {3}), mesh, {Replicate()});
  REQUIRE_THROWS_WITH(dtensor::embedding(t, bad), Catch::Contains("indices must be in [0, 7)"));
}

TEST_CASE("dtensor ops: reshape keeps a shard whose dim survives and replicates otherwise") {
  Tensor x = random_full({6, 4, 5}, 81);
  for (const auto& mesh : test_meshes()) {
    for (const auto& p : placements_for(mesh, 3)) {
      for (const Shape& shape : {Shape{6, 20}, Shape{6, 2, 2, 5}, Shape{24, 5}, Shape{-1}, Shape{3, 2, 20}}) {
        INFO(to_string(p) << " -> " << shape_str(shape));
        check_op(
            mesh, {{x, p}}, [&](const auto& t) { return dtensor::reshape(t[0], shape); },
            [&](const auto& t) { return t[0].reshape(shape); });
      }
    }
  }
  auto mesh = test_meshes()[0];
  REQUIRE(dtensor::view(distribute_tensor(x, mesh, {Shard(0)}), {6, 20}).placements() == Placements{Shard(0)});
  REQUIRE(dtensor::view(distribute_tensor(x, mesh, {Shard(2)}), {24, 5}).placements() == Placements{Shard(1)});
  REQUIRE(dtensor::view(distribute_tensor(x, mesh, {Shard(1)}), {6, 20}).placements() == Placements{Replicate()});
  REQUIRE(dtensor::view(distribute_tensor(x, mesh, {Partial()}), {6, 20}).placements() == Placements{Partial()});
}

TEST_CASE("dtensor ops: a chain of ops (linear, gelu, linear, mean) gives the single-process gradients") {
  Tensor x = random_full({7, 6}, 91), w1 = random_full({8, 6}, 92), b1 = random_full({8}, 93);
  Tensor w2 = random_full({6, 8}, 94);
  auto mesh = test_meshes()[0];
  check_op(
      mesh, {{x, {Shard(0)}}, {w1, {Shard(0)}}, {b1, {Shard(0)}}, {w2, {Shard(1)}}},
      [](const auto& t) { return dtensor::mean(dtensor::gelu(dtensor::linear(dtensor::gelu(dtensor::linear(t[0], t[1], t[2])), t[3])), {1}); },
      [](const auto& t) { return mean(gelu(linear(gelu(linear(t[0], t[1], t[2])), t[3])), {1}); });
  check_op(
      mesh, {{x, {Replicate()}}, {w1, {Shard(0)}}, {b1, {Shard(0)}}, {w2, {Shard(1)}}},
      [](const auto& t) { return dtensor::sum(dtensor::linear(dtensor::relu(dtensor::linear(t[0], t[1], t[2])), t[3])); },
      [](const auto& t) { return sum(linear(relu(linear(t[0], t[1], t[2])), t[3])); });
}

TEST_CASE("dtensor ops: the propagation decision is cached per op and input specs") {
  auto mesh = test_meshes()[0];
  DTensor a = distribute_tensor(random_full({4, 3}, 1), mesh, {Shard(0)});
  DTensor b = distribute_tensor(random_full({4, 3}, 2), mesh, {Replicate()});
  dtensor::clear_rule_cache();
  dtensor::add(a, b);
  REQUIRE(dtensor::rule_cache_stats().misses == 1);
  REQUIRE(dtensor::rule_cache_stats().hits == 0);
  dtensor::add(a, b);
  REQUIRE(dtensor::rule_cache_stats().misses == 1);
  REQUIRE(dtensor::rule_cache_stats().hits == 1);
  dtensor::add(b, a);  // other input specs
  dtensor::mul(a, b);  // other op
  REQUIRE(dtensor::rule_cache_stats().misses == 3);
  REQUIRE(dtensor::rule_cache_stats().entries == 3);
}

TEST_CASE("dtensor ops: DTensors on different meshes are a clear error") {
  const int64_t n = distributed::world_size();
  auto m1 = init_device_mesh(DeviceType::cpu, {n}, {"a"});
  auto m2 = init_device_mesh(DeviceType::cpu, {n}, {"b"});
  DTensor a = distribute_tensor(random_full({4, 3}, 1), m1, {Replicate()});
  DTensor b = distribute_tensor(random_full({4, 3}, 2), m2, {Replicate()});
  REQUIRE_THROWS_WITH(dtensor::add(a, b), Catch::Contains("same mesh") && Catch::Contains("a=") &&
                                           Catch::Contains("b="));
  DTensor w = distribute_tensor(random_full({5, 3}, 3), m2, {Replicate()});
  REQUIRE_THROWS_WITH(dtensor::linear(a, w), Catch::Contains("dtensor::linear") && Catch::Contains("same mesh"));
  REQUIRE_THROWS_WITH(dtensor::add(a, DTensor()), Catch::Contains("undefined"));
}
