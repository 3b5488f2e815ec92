// --keep-last's retention (remove_old_checkpoints, dtr-train/train_checkpoint.h)
// on a directory of made-up checkpoints: the newest N complete ones are kept,
// older ones and older unfinished saves go, and nothing else is touched.
#include "train_checkpoint.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// A fresh directory of checkpoints named `complete` (with a metadata.json) and
// `other` (directories without one: unfinished saves, foreign names).
fs::path checkpoints_with(const std::string& name, const std::vector<std::string>& complete,
                          const std::vector<std::string>& other) {
  const fs::path dir = fs::temp_directory_path() / ("dtr_retention_" + name);
  fs::remove_all(dir);
  for (const auto& c : complete) {
    fs::create_directories(dir / c);
    std::ofstream(dir / c / "metadata.json") << "{}";
  }
  for (const auto& o : other) fs::create_directories(dir / o);
  return dir;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("keep-last keeps the newest complete checkpoints up to the one just saved", "[train][retention]") {
  const fs::path dir = checkpoints_with("keep2", {"step_5", "step_10", "step_15", "step_100"},
                                        {"step_12.tmp", "step_20.tmp", "step_7_old", "notes"});
  const auto removed = dtr::train::remove_old_checkpoints(dir, 15, 2);
  CHECK(removed.size() == 2);
  // Older than step 15: step_10 is the second newest and stays; step_5 and the
  // unfinished step_12 go. step_100 and step_20.tmp are of later steps (an
  // earlier run that went further), step_7_old and notes are not checkpoints.
  CHECK(names_in(dir) == std::vector<std::string>{"notes", "step_10", "step_100", "step_15", "step_20.tmp", "step_7_old"});
  fs::remove_all(dir);
}

TEST_CASE("keep-last 1 keeps only the checkpoint just saved, in numeric order", "[train][retention]") {
  const fs::path dir = checkpoints_with("keep1", {"step_9", "step_10", "step_90"}, {});
  dtr::train::remove_old_checkpoints(dir, 90, 1);
  CHECK(names_in(dir) == std::vector<std::string>{"step_90"});
  fs::remove_all(dir);
}

TEST_CASE("keep-last larger than the checkpoints removes none", "[train][retention]") {
  const fs::path dir = checkpoints_with("keep5", {"step_1", "step_2", "step_3"}, {});
  CHECK(dtr::train::remove_old_checkpoints(dir, 3, 5).empty());
  CHECK(names_in(dir) == std::vector<std::string>{"step_1", "step_2", "step_3"});
  fs::remove_all(dir);
}
