#include "kjit/tuner/family.h"

#include <fmt/format.h>

#include "kjit/support/error.h"
#include "kjit/tuner/attention_space.h"
#include "kjit/tuner/elementwise_space.h"
#include "kjit/tuner/matmul_space.h"

namespace kjit::tuner {

void SpecReader::only(std::initializer_list<const char*> known) const {
  for (const auto& [key, value] : spec_.items()) {
    bool found = key == "family";
    for (const char* k : known) found = found || key == k;
    if (found) continue;
    std::string fields;
    for (const char* k : known) fields += (fields.empty() ? "" : ", ") + std::string(k);
    throw UserError(family_ + " spec: unknown field '" + key + "'", "the fields are " + fields);
  }
}

int64_t SpecReader::positive(const char* key, int64_t fallback, const char* hint) const {
  if (!spec_.contains(key)) {
    if (fallback > 0) return fallback;
    throw UserError(fmt::format("{} spec: '{}' is missing", family_, key), hint);
  }
  const nlohmann::json& v = spec_.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 1)
    throw UserError(
        fmt::format("{} spec: '{}' must be a positive integer, got {}", family_, key, v.dump()));
  return v.get<int64_t>();
}

std::string SpecReader::text(const char* key, const std::string& fallback) const {
  if (!spec_.contains(key)) return fallback;
  if (!spec_.at(key).is_string())
    throw UserError(
        fmt::format("{} spec: '{}' must be a string, got {}", family_, key, spec_.at(key).dump()));
  return spec_.at(key).get<std::string>();
}

const TuningProblem& measured_problem(const TuningProblem& problem,
                                      std::unique_ptr<TuningProblem>& holder) {
  holder = problem.tuned_as();
  return holder ? *holder : problem;
}

std::string throughput(const TuningProblem& problem, double ms) {
  if (!(ms > 0)) return "";
  const Work w = problem.work();
  if (problem.family() == "matmul" || problem.family() == "attention")
    return fmt::format("{:.1f} TFLOP/s", w.flops / (ms * 1e-3) / 1e12);
  if (w.bytes > 0) return fmt::format("{:.0f} GB/s", w.bytes / (ms * 1e-3) / 1e9);
  return "";
}

std::unique_ptr<TuningProblem> make_problem(const nlohmann::json& spec) {
  if (!spec.is_object())
    throw UserError(
        "a problem spec is a JSON object such as {\"family\": \"matmul\", \"m\": 4096, "
        "...}; got " +
        spec.dump());
  if (!spec.contains("family") || !spec.at("family").is_string())
    throw UserError(
        "a problem spec needs \"family\": \"matmul\", \"elementwise\" or \"attention\"");
  const std::string family = spec.at("family").get<std::string>();
  if (family == "matmul") return matmul_from_spec(spec);
  if (family == "elementwise") return elementwise_from_spec(spec);
  if (family == "attention") return attention_from_spec(spec);
  throw UserError("unknown kernel family '" + family + "'",
                  "the families are matmul, elementwise, attention");
}

std::unique_ptr<TuningProblem> problem_from_signature(const std::string& signature) {
  if (std::unique_ptr<TuningProblem> p = matmul_from_signature(signature)) return p;
  if (std::unique_ptr<TuningProblem> p = attention_from_signature(signature)) return p;
  return elementwise_from_signature(signature);
}

}  // namespace kjit::tuner
