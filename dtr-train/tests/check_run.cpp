// dtr_train_check OUT_DIR STEPS: checks what a dtr-train run wrote (used by the
// end-to-end CTest test): metrics.jsonl has STEPS lines, each a JSON object with
// step = line number and a finite loss, the last with a val_loss, and the loss
// fell; config.json parses; loss.svg is well-formed XML (checked by the small
// parser below: one root, balanced tags, quoted attributes, known entities) with
// an <svg> root holding exactly two <polyline> elements with points.
#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "FAIL: " << what << "\n";
    ++failures;
  }
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Element {
  std::string name;
  std::map<std::string, std::string> attributes;
};

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == ':' || c == '.';
}

// Text or an attribute value: no '<', and only known entities. Returns an error or "".
std::string check_text(const std::string& text) {
  for (size_t k = 0; k < text.size(); ++k) {
    if (text[k] == '<') return "'<' in text";
    if (text[k] == '&') {
      const size_t semi = text.find(';', k);
      if (semi == std::string::npos) return "unterminated entity";
      const std::string ent = text.substr(k + 1, semi - k - 1);
      if (ent != "amp" && ent != "lt" && ent != "gt" && ent != "quot" && ent != "apos" && ent.rfind('#', 0) != 0) {
        return "unknown entity &" + ent + ";";
      }
    }
  }
  return "";
}

// The end tag at s[i] ("</name>"), which must close the innermost open element;
// moves i past it. Returns an error or "".
std::string parse_end_tag(const std::string& s, size_t& i, std::vector<std::string>& open) {
  size_t j = i + 2;
  while (j < s.size() && is_name_char(s[j])) ++j;
  const std::string name = s.substr(i + 2, j - i - 2);
  while (j < s.size() && std::isspace(static_cast<unsigned char>(s[j]))) ++j;
  if (j >= s.size() || s[j] != '>') return "bad end tag </" + name;
  if (open.empty() || open.back() != name) return "end tag </" + name + "> does not match";
  open.pop_back();
  i = j + 1;
  return "";
}

// The start tag at s[i] ("<name attr='v' ...>" or ".../>"): its element, whether it
// closes itself; moves i past it. Returns an error or "".
std::string parse_start_tag(const std::string& s, size_t& i, Element& el, bool& self_closing) {
  size_t j = i + 1;
  while (j < s.size() && is_name_char(s[j])) ++j;
  el = Element{s.substr(i + 1, j - i - 1), {}};
  if (el.name.empty()) return "empty element name";
  self_closing = false;
  for (;;) {
    while (j < s.size() && std::isspace(static_cast<unsigned char>(s[j]))) ++j;
    if (j >= s.size()) return "unterminated tag <" + el.name;
    if (s[j] == '>') { ++j; break; }
    if (s.compare(j, 2, "/>") == 0) { j += 2; self_closing = true; break; }
    size_t k = j;
    while (k < s.size() && is_name_char(s[k])) ++k;
    const std::string attr = s.substr(j, k - j);
    if (attr.empty() || k >= s.size() || s[k] != '=') return "bad attribute in <" + el.name;
    const char q = s[k + 1];
    if (q != '"' && q != '\'') return "unquoted attribute " + attr;
    const size_t end = s.find(q, k + 2);
    if (end == std::string::npos) return "unterminated attribute " + attr;
    const std::string value = s.substr(k + 2, end - k - 2);
    if (auto e = check_text(value); !e.empty()) return e + " in attribute " + attr;
    if (el.attributes.count(attr)) return "duplicate attribute " + attr;
    el.attributes[attr] = value;
    j = end + 1;
  }
  i = j;
  return "";
}

// A minimal XML well-formedness check; collects every element. Returns an error or "".
std::string parse_xml(const std::string& s, std::vector<Element>& elements) {
  size_t i = 0;
  std::vector<std::string> open;
  int roots = 0;
  while (i < s.size()) {
    if (s[i] != '<') {
      const size_t next = s.find('<', i);
      const std::string text = s.substr(i, next == std::string::npos ? std::string::npos : next - i);
      if (open.empty() && text.find_first_not_of(" \t\r\n") != std::string::npos) return "text outside the root";
      if (auto e = check_text(text); !e.empty()) return e;
      i = next == std::string::npos ? s.size() : next;
      continue;
    }
    if (s.compare(i, 5, "<?xml") == 0) {
      if (i != 0) return "XML declaration not at the start";
      const size_t end = s.find("?>", i);
      if (end == std::string::npos) return "unterminated declaration";
      i = end + 2;
      continue;
    }
    if (s.compare(i, 4, "<!--") == 0) {
      const size_t end = s.find("-->", i);
      if (end == std::string::npos) return "unterminated comment";
      i = end + 3;
      continue;
    }
    if (s.compare(i, 2, "</") == 0) {
      if (auto e = parse_end_tag(s, i, open); !e.empty()) return e;
      continue;
    }
    Element el;
    bool self_closing = false;
    if (auto e = parse_start_tag(s, i, el, self_closing); !e.empty()) return e;
    if (open.empty() && ++roots > 1) return "more than one root element";
    elements.push_back(el);
    if (!self_closing) open.push_back(el.name);
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  if (roots != 1) return "no root element";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: dtr_train_check OUT_DIR STEPS\n";
    return 2;
  }
  const std::string dir = argv[1];
  const int steps = std::atoi(argv[2]);

  std::ifstream metrics(dir + "/metrics.jsonl");
  expect(static_cast<bool>(metrics), "metrics.jsonl exists");
  std::vector<double> losses;
  std::string line;
  bool last_has_val = false;
  while (std::getline(metrics, line)) {
    try {
      const auto j = nlohmann::json::parse(line);
      expect(j.is_object(), "metrics line is an object");
      expect(j.at("step").get<int>() == static_cast<int>(losses.size()) + 1, "step numbers count 1, 2, ...");
      const double loss = j.at("loss").get<double>();
      expect(std::isfinite(loss), "finite loss");
      losses.push_back(loss);
      for (const char* key : {"lr", "grad_norm", "tokens_per_second", "flops_per_second"}) {
        expect(j.contains(key), std::string("metrics line has ") + key);
      }
      last_has_val = j.contains("val_loss");
    } catch (const std::exception& e) {
      expect(false, "metrics line " + std::to_string(losses.size() + 1) + " parses: " + e.what());
      break;
    }
  }
  expect(static_cast<int>(losses.size()) == steps,
         "metrics.jsonl has one line per step: " + std::to_string(losses.size()) + " vs " + std::to_string(steps));
  expect(last_has_val, "the last step has a val_loss");
  if (losses.size() >= 4) {
    const double end = (losses[losses.size() - 1] + losses[losses.size() - 2]) / 2;
    std::cout << "loss " << losses.front() << " -> " << end << "\n";
    expect(end < 0.8 * losses.front(), "the loss fell by at least 20%");
  }

  try {
    const auto config = nlohmann::json::parse(slurp(dir + "/config.json"));
    expect(config.contains("model") && config.contains("model_config"), "config.json has model and model_config");
  } catch (const std::exception& e) {
    expect(false, std::string("config.json parses: ") + e.what());
  }

  std::vector<Element> elements;
  const std::string svg = slurp(dir + "/loss.svg");
  const std::string error = parse_xml(svg, elements);
  expect(error.empty(), "loss.svg is well-formed XML: " + error);
  if (error.empty()) {
    expect(!elements.empty() && elements[0].name == "svg", "loss.svg has an <svg> root");
    int polylines = 0;
    for (const auto& el : elements) {
      if (el.name != "polyline") continue;
      ++polylines;
      expect(el.attributes.count("points") && !el.attributes.at("points").empty(), "a polyline has points");
    }
    expect(polylines == 2, "loss.svg has two polylines (train, validation): " + std::to_string(polylines));
  }
  if (failures == 0) std::cout << "dtr-train output in " << dir << ": OK\n";
  return failures == 0 ? 0 : 1;
}
