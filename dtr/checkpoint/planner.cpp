#include "dtr/checkpoint/planner.h"

#include "dtr/base/error.h"
#include "dtr/mesh/distributed.h"

namespace dtr::checkpoint {

DType entry_dtype(const Entry& entry) {
  if (auto* d = std::get_if<DTensor>(&entry)) return d->dtype();
  return std::get<Tensor>(entry).dtype();
}

Shape entry_shape(const Entry& entry) {
  if (auto* d = std::get_if<DTensor>(&entry)) return d->shape();
  return std::get<Tensor>(entry).sizes();
}

Tensor entry_local(const Entry& entry) {
  if (auto* d = std::get_if<DTensor>(&entry)) return d->to_local();
  return std::get<Tensor>(entry);
}

std::optional<Box> box_to_write(const std::string& name, const Entry& entry) {
  Box box;
  if (auto* d = std::get_if<DTensor>(&entry)) {
    const DTensorSpec& spec = d->spec();
    DTR_CHECK(!spec.has_partial(), "checkpoint: tensor '{}' has a Partial placement ({}); reduce it before saving",
              name, spec.to_string());
    for (int m = 0; m < spec.mesh.ndim(); ++m) {
      if (spec.placements[static_cast<size_t>(m)].is_replicate() && spec.mesh.coordinate(m) != 0) return std::nullopt;
    }
    box = {spec.local_offset(), spec.local_shape()};
    DTR_CHECK(d->to_local().sizes() == box.shape, "checkpoint: tensor '{}': local part is [{}], its spec {} says [{}]",
              name, fmt::join(d->to_local().sizes(), ", "), spec.to_string(), fmt::join(box.shape, ", "));
  } else {
    if (distributed::rank() != 0) return std::nullopt;
    const Tensor& t = std::get<Tensor>(entry);
    box = {Shape(t.sizes().size(), 0), t.sizes()};
  }
  if (box.numel() == 0) return std::nullopt;
  return box;
}

Box box_to_read(const Entry& entry) {
  if (auto* d = std::get_if<DTensor>(&entry)) return {d->spec().local_offset(), d->spec().local_shape()};
  const Tensor& t = std::get<Tensor>(entry);
  return {Shape(t.sizes().size(), 0), t.sizes()};
}

}  // namespace dtr::checkpoint
