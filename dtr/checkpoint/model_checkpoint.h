// A model and its optimizer saved or restored in one call: the checkpoint of an
// ordinary training loop, over checkpoint::save / load of a CheckpointState
// (dtr/checkpoint/checkpoint.h, checkpoint_state.h), which remain for anything
// else (several models, tensors of your own).
//
//   checkpoint::save(dir, model, opt, {{"step", step}});     // every rank
//   nlohmann::json extra = checkpoint::load(dir, model, opt);  // any world size
//   int64_t step = extra.at("step");
//   checkpoint::async_save(dir, model, opt, {{"step", step}});  // returns once copied
//
// The parameters are keyed by their names in the model, the optimizer state by
// "optim.<parameter name>.<state name>"; `extra` is any JSON object of yours
// (step, data position, RNG state). Build the optimizer from model.parameters()
// after fully_shard (or the tensor-parallel plan); load() replaces its state and
// its lr with the checkpoint's (its other hyperparameters, such as weight decay
// and betas, stay those it was built with). Loading reshards: the world size and
// the layout may differ from the save's (FSDP, HSDP, tensor parallel, none).
// Errors are checkpoint::load's: the same dtr::Error on every rank, naming the
// tensor, the file and the ranks, with nothing loaded.
#pragma once

#include "dtr/checkpoint/async_save.h"
#include "dtr/checkpoint/checkpoint.h"
#include "dtr/nn/module.h"
#include "dtr/nn/optim/optimizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>

namespace dtr::checkpoint {

void save(const std::filesystem::path& dir, nn::Module& model, const nn::optim::Optimizer& optimizer,
          const nlohmann::json& extra = nlohmann::json::object(), const SaveOptions& options = {});
// The parameters alone (inference, or fine-tuning with a new optimizer).
void save(const std::filesystem::path& dir, nn::Module& model, const nlohmann::json& extra = nlohmann::json::object(),
          const SaveOptions& options = {});

// The same as save(), written in the background (dtr/checkpoint/async_save.h:
// poll_async_save() or wait_async_save() commits it).
void async_save(const std::filesystem::path& dir, nn::Module& model, const nn::optim::Optimizer& optimizer,
                const nlohmann::json& extra = nlohmann::json::object(), const SaveOptions& options = {});
void async_save(const std::filesystem::path& dir, nn::Module& model,
                const nlohmann::json& extra = nlohmann::json::object(), const SaveOptions& options = {});

// Restores the parameters and the optimizer's state; returns the saved `extra`.
nlohmann::json load(const std::filesystem::path& dir, nn::Module& model, nn::optim::Optimizer& optimizer);
// Restores the parameters alone (a checkpoint that also holds optimizer state loads too).
nlohmann::json load(const std::filesystem::path& dir, nn::Module& model);

}  // namespace dtr::checkpoint
