// kjit cache path|ls|show|stats|verify|export|import|merge|clear|vacuum — the
// user's store of compiled binaries and tuning results (cache/store.h).
#include <fmt/format.h>

#include <ctime>
#include <iostream>
#include <memory>

#include "kjit/cache/sqlite.h"
#include "kjit/cache/store.h"
#include "kjit/support/error.h"
#include "kjit/support/json.h"
#include "tools/cli/command.h"

namespace kjit::cli {

namespace {

using cache::Store;

struct CacheCommandOptions {
  bool json = false;
  std::string key;
  std::string file;
  std::string gpu;
  bool source = false;
  bool fix = false;
  bool yes = false;
  bool binaries_only = false;
  bool trust_binaries = false;
};

// Every subcommand but `path` needs a working store.
std::unique_ptr<Store> open_store() {
  std::unique_ptr<Store> store = Store::open_default();
  if (!store->enabled()) throw CacheError("the cache is disabled: " + store->disabled_reason());
  return store;
}

std::string date(int64_t unix_seconds) {
  if (unix_seconds <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &utc);
  return text;
}

std::string human_bytes(int64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < 1024 * 1024) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  if (bytes < int64_t{1} << 30) return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0));
  return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

nlohmann::json binary_json(const cache::BinaryRecord& b) {
  return {{"key", b.key},
          {"arch", b.arch},
          {"bytes", b.bytes},
          {"checksum", b.checksum},
          {"nvrtc_version", b.nvrtc_version},
          {"generator_version", b.generator_version},
          {"created", b.created},
          {"last_used", b.last_used},
          {"hits", b.hits}};
}

nlohmann::json measurement_json(const cache::Measurement& m) {
  return {{"median_ms", m.median_ms}, {"spread", m.spread}, {"runs", m.runs}};
}

nlohmann::json tuning_json(const cache::TuningRecord& t) {
  nlohmann::json out = {{"gpu_model", t.gpu_model},
                        {"problem", t.problem},
                        {"config", t.config},
                        {"tuner_version", t.tuner_version},
                        {"created", t.created}};
  out.update(measurement_json(t.measured));
  return out;
}

nlohmann::json device_json(const cache::DeviceRecord& d) {
  return {{"model", d.model},
          {"name", d.name},
          {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
          {"sm_count", d.sm_count},
          {"driver", d.driver},
          {"memory_bytes", d.memory_bytes},
          {"first_seen", d.first_seen},
          {"last_seen", d.last_seen}};
}

nlohmann::json counts_json(const cache::TableCounts& c) {
  return {{"inserted", c.inserted},
          {"replaced", c.replaced},
          {"kept", c.kept},
          {"rejected", c.rejected},
          {"skipped", c.skipped}};
}

void print_transfer(const std::string& what, const cache::TransferReport& r, bool json) {
  if (json) {
    return print_json({{"action", what},
                       {"devices", counts_json(r.devices)},
                       {"binaries", counts_json(r.binaries)},
                       {"tunings", counts_json(r.tunings)},
                       {"trials", counts_json(r.trials)}});
  }
  std::cout << what << ":\n";
  auto line = [](const char* table, const cache::TableCounts& c, const char* kept_means,
                 const char* replaced_means, const char* rejected_means) {
    std::cout << fmt::format("  {:<9} {} inserted, {} replaced{}, {} kept{}, {} rejected{}\n",
                             table, c.inserted, c.replaced, replaced_means, c.kept, kept_means,
                             c.rejected, c.rejected ? rejected_means : "");
  };
  const char* invalid = " (impossible values: an empty key, a bad measurement, a future time)";
  line("devices", r.devices, " (already newer)", " (newer)", invalid);
  line("binaries", r.binaries, " (already present)", "", " (checksum or MAC failed, or no key)");
  line("tunings", r.tunings, " (existing better measured)", " (better measured)", invalid);
  line("trials", r.trials, " (existing better measured)", " (better measured)", invalid);
  if (r.binaries.skipped)
    std::cout << fmt::format(
        "  {} binaries left out: compiled code crosses between files only with "
        "--trust-binaries (and only from a trusted cache)\n",
        r.binaries.skipped);
}

void run_path(const CacheCommandOptions& o) {
  std::string reason;
  std::string path = Store::default_path(&reason);
  if (o.json) return print_json({{"path", path}, {"enabled", !path.empty()}, {"reason", reason}});
  if (path.empty()) {
    std::cout << "cache disabled: " << reason << "\n";
    return;
  }
  std::cout << path << "\n";
}

void run_ls(const CacheCommandOptions& o) {
  std::unique_ptr<Store> store = open_store();
  std::vector<cache::BinaryRecord> binaries = store->binaries();
  std::vector<cache::TuningRecord> tunings = store->tunings();
  std::vector<cache::DeviceRecord> devices = store->devices();
  if (o.json) {
    nlohmann::json out = {{"binaries", nlohmann::json::array()},
                          {"tunings", nlohmann::json::array()},
                          {"devices", nlohmann::json::array()}};
    for (const auto& b : binaries) out["binaries"].push_back(binary_json(b));
    for (const auto& t : tunings) out["tunings"].push_back(tuning_json(t));
    for (const auto& d : devices) out["devices"].push_back(device_json(d));
    return print_json(out);
  }
  std::cout << fmt::format("binaries ({})\n", binaries.size());
  if (!binaries.empty())
    std::cout << fmt::format("  {:<32} {:<7} {:>10} {:>6}  {}\n", "key", "arch", "size", "hits",
                             "last used (UTC)");
  for (const auto& b : binaries)
    std::cout << fmt::format("  {:<32} {:<7} {:>10} {:>6}  {}\n", b.key, b.arch,
                             human_bytes(b.bytes), b.hits, date(b.last_used));
  std::cout << fmt::format("tunings ({})\n", tunings.size());
  for (const auto& t : tunings)
    std::cout << fmt::format("  {} | {} -> {}  ({:.4f} ms, ±{:.1f}%, {} runs)\n", t.gpu_model,
                             t.problem, t.config, t.measured.median_ms, t.measured.spread * 100,
                             t.measured.runs);
  std::cout << fmt::format("devices ({})\n", devices.size());
  for (const auto& d : devices)
    std::cout << fmt::format("  {}  driver {}, {}, last seen {}\n", d.model, d.driver,
                             human_bytes(d.memory_bytes), date(d.last_seen));
}

void run_show(const CacheCommandOptions& o) {
  std::unique_ptr<Store> store = open_store();
  std::optional<cache::BinaryRecord> b = store->describe_binary(o.key);
  if (!b)
    throw UserError(fmt::format("no binary whose key starts with '{}'", o.key),
                    "`kjit cache ls` lists the keys");
  nlohmann::json stats = parse_json(b->ptxas_stats, /*allow_exceptions=*/false);
  if (stats.is_discarded()) stats = b->ptxas_stats;
  if (o.json) {
    nlohmann::json out = binary_json(*b);
    out["cubin_bytes"] = b->cubin.size();
    out["options"] = b->options;
    out["ptxas_stats"] = stats;
    out["nvrtc_log"] = b->nvrtc_log;
    out["source"] = b->source;
    return print_json(out);
  }
  std::cout << fmt::format(
      "key        {}\narch       {}\ncubin      {} (checksum {})\nNVRTC      {}\n"
      "generator  {}\ncreated    {}\nlast used  {}\nhits       {}\noptions    {}\n",
      b->key, b->arch, human_bytes(static_cast<int64_t>(b->cubin.size())), b->checksum,
      b->nvrtc_version, b->generator_version, date(b->created), date(b->last_used), b->hits,
      fmt::join(b->options, " "));
  std::cout << "ptxas      " << (stats.is_string() ? stats.get<std::string>() : stats.dump())
            << "\n";
  if (!b->nvrtc_log.empty()) std::cout << "NVRTC log:\n" << b->nvrtc_log;
  if (o.source) std::cout << "source:\n" << b->source;
}

void run_stats(const CacheCommandOptions& o) {
  std::unique_ptr<Store> store = open_store();
  cache::CacheStats s = store->stats();
  if (o.json) {
    return print_json({{"path", s.path},
                       {"schema_version", s.schema_version},
                       {"file_bytes", s.file_bytes},
                       {"free_bytes", s.free_bytes},
                       {"binaries", s.binaries},
                       {"binary_bytes", s.binary_bytes},
                       {"max_bytes", s.max_bytes},
                       {"hits", s.hits},
                       {"tunings", s.tunings},
                       {"trials", s.trials},
                       {"devices", s.devices}});
  }
  std::cout << fmt::format(
      "{} (schema {})\n  file      {} ({} free; `kjit cache vacuum` returns it)\n"
      "  binaries  {}, {} of {} (KJIT_CACHE_MAX_MB), {} hits from the store\n"
      "  tunings   {}\n  trials    {}\n  devices   {}\n",
      s.path, s.schema_version, human_bytes(s.file_bytes), human_bytes(s.free_bytes), s.binaries,
      human_bytes(s.binary_bytes), human_bytes(s.max_bytes), s.hits, s.tunings, s.trials,
      s.devices);
}

void run_verify(const CacheCommandOptions& o) {
  std::unique_ptr<Store> store = open_store();
  cache::VerifyReport r = store->verify(o.fix);
  exit_code = r.ok() || r.replaced_damaged ? 0 : 1;
  if (o.json) {
    return print_json({{"ok", r.ok()},
                       {"replaced_damaged", r.replaced_damaged},
                       {"damaged_on_open", r.damaged_on_open},
                       {"integrity", r.integrity},
                       {"trusted", r.untrusted.empty()},
                       {"untrusted", r.untrusted},
                       {"binaries_checked", r.binaries_checked},
                       {"bad_binaries", r.bad_binaries},
                       {"unauthenticated", r.unauthenticated},
                       {"bad_rows", r.bad_rows},
                       {"removed", r.removed}});
  }
  if (!r.damaged_on_open.empty())
    std::cout << "damaged:   " << r.damaged_on_open
              << "\n           (when opened; an empty store started in its place, checked below)\n";
  std::cout << "integrity: " << fmt::format("{}", fmt::join(r.integrity, "\n  ")) << "\n";
  if (!r.untrusted.empty())
    std::cout << "trust:     binaries are not loaded from this cache: " << r.untrusted << "\n";
  std::cout << fmt::format("binaries:  {} checked, {} failed their checksum", r.binaries_checked,
                           r.bad_binaries.size());
  if (r.untrusted.empty())
    std::cout << fmt::format(", {} failed authentication", r.unauthenticated.size());
  if (r.removed) std::cout << fmt::format(", {} removed", r.removed);
  std::cout << "\n";
  for (const std::string& key : r.bad_binaries) std::cout << "  bad checksum: " << key << "\n";
  for (const std::string& key : r.unauthenticated)
    std::cout << "  not stored by you (planted or swapped): " << key << "\n";
  if ((!r.bad_binaries.empty() || !r.unauthenticated.empty()) && !o.fix)
    std::cout << "(`kjit cache verify --fix` removes them; they are also dropped and recompiled "
                 "on their next use)\n";
  std::cout << fmt::format("rows:      {} tunings and trials no store would take (not used)\n",
                           r.bad_rows.size());
  for (const std::string& row : r.bad_rows) std::cout << "  " << row << "\n";
  if (!r.bad_rows.empty() && !o.fix) std::cout << "(`kjit cache verify --fix` removes them)\n";
  if (r.replaced_damaged)
    std::cout << "the damaged file was moved aside (the warning above says where) and an empty "
                 "store started in its place\n";
  else if (!r.ok() && r.binaries_checked == 0 && !r.integrity.empty() && r.integrity[0] != "ok")
    std::cout << "(the file is damaged: `kjit cache verify --fix` or `kjit cache clear --yes` "
                 "moves it aside and starts an empty store)\n";
}

void run_export(const CacheCommandOptions& o) {
  std::unique_ptr<Store> store = open_store();
  cache::TransferReport r = store->export_to(o.file, o.gpu);
  print_transfer(o.gpu.empty() ? "exported to " + o.file : "exported " + o.gpu + " to " + o.file, r,
                 o.json);
}

void run_import(const CacheCommandOptions& o) {
  std::unique_ptr<Store> store = open_store();
  print_transfer("imported " + o.file, store->import_from(o.file, o.trust_binaries), o.json);
}

void run_merge(const CacheCommandOptions& o) {
  std::unique_ptr<Store> store = open_store();
  print_transfer("merged into " + o.file, store->merge_into(o.file, o.trust_binaries), o.json);
}

void run_clear(const CacheCommandOptions& o) {
  std::unique_ptr<Store> store = open_store();
  if (!o.yes) {
    cache::CacheStats s = store->stats();
    throw UserError(
        o.binaries_only
            ? fmt::format("this deletes {} binaries", s.binaries)
            : fmt::format("this deletes {} binaries, {} tunings, {} trials and {} devices",
                          s.binaries, s.tunings, s.trials, s.devices),
        "pass --yes to go ahead (--binaries-only keeps the tuning results)");
  }
  cache::ClearReport r = store->clear(o.binaries_only);
  if (o.json) {
    return print_json({{"binaries", r.binaries},
                       {"tunings", r.tunings},
                       {"trials", r.trials},
                       {"devices", r.devices},
                       {"replaced_damaged", r.replaced_damaged}});
  }
  if (r.replaced_damaged) {
    std::cout << "the file was damaged: moved it aside (the warning above says where) and "
                 "started an empty store\n";
    return;
  }
  std::cout << fmt::format("deleted {} binaries, {} tunings, {} trials, {} devices\n", r.binaries,
                           r.tunings, r.trials, r.devices);
}

void run_vacuum(const CacheCommandOptions& o) {
  std::unique_ptr<Store> store = open_store();
  int64_t freed = store->vacuum();
  int64_t size = store->stats().file_bytes;
  if (o.json) return print_json({{"freed_bytes", freed}, {"file_bytes", size}});
  std::cout << fmt::format("gave back {}; the file is now {}\n", human_bytes(freed),
                           human_bytes(size));
}

void add_cache_command(CLI::App& app) {
  auto o = std::make_shared<CacheCommandOptions>();
  CLI::App* cache = app.add_subcommand(
      "cache", "Inspect and manage the store of compiled kernels and tuning results");
  cache->require_subcommand(1);
  cache->footer(
      "The store is $KJIT_CACHE_DIR/kjit.db (default $XDG_CACHE_HOME/kjit/, else "
      "~/.cache/kjit/); KJIT_CACHE=off disables it, KJIT_CACHE_MAX_MB bounds its binaries.");
  auto sub = [&](const char* name, const char* description, void (*run)(const CacheCommandOptions&),
                 bool json) {
    CLI::App* cmd = cache->add_subcommand(name, description);
    if (json) cmd->add_flag("--json", o->json, "Print JSON");
    cmd->callback([o, run] {
      try {
        run(*o);
      } catch (const cache::SqliteError& e) {
        if (!e.is_corruption()) throw;
        throw CacheError(std::string(e.what()) +
                         "; the store's file is damaged: `kjit cache verify` shows where, "
                         "`kjit cache clear --yes` moves it aside and starts an empty store");
      }
    });
    return cmd;
  };
  sub("path", "Print where the store is (or why it is disabled)", run_path, true);
  sub("ls", "List binaries, tunings and devices", run_ls, true);
  CLI::App* show =
      sub("show", "Show one binary: metadata, options, ptxas report, log", run_show, true);
  show->add_option("key", o->key, "The key, or a unique prefix of it")->required();
  show->add_flag("--source", o->source, "Also print the CUDA source");
  sub("stats", "Counts and sizes", run_stats, true);
  CLI::App* verify = sub("verify",
                         "Check the file's integrity, who could write it, and every binary's "
                         "checksum and authentication (exit 1 when something is wrong)",
                         run_verify, true);
  verify->add_flag("--fix", o->fix,
                   "Delete the binaries whose checksum or authentication fails, and rows no "
                   "store would take");
  CLI::App* exp =
      sub("export", "Write the store (or one GPU model's part) to a new file", run_export, true);
  exp->add_option("file", o->file, "The new file (must not exist)")->required();
  exp->add_option("--gpu", o->gpu,
                  "Only this GPU model (as `kjit cache ls` names it): its device, tunings, "
                  "trials and the binaries for its architecture");
  CLI::App* imp = sub("import",
                      "Copy another kjit file's tunings into the store (the better-measured "
                      "wins on conflicts); its binaries only with --trust-binaries",
                      run_import, true);
  imp->add_option("file", o->file, "A kjit cache file (e.g. from `kjit cache export`)")->required();
  imp->add_flag("--trust-binaries", o->trust_binaries,
                "Also take its compiled kernels, which kjit will then run: only for a file "
                "you trust as you trust your own builds");
  CLI::App* merge = sub("merge",
                        "Copy the store into another kjit file (created if missing), "
                        "keeping the better-measured tuning on conflicts; binaries only with "
                        "--trust-binaries",
                        run_merge, true);
  merge->add_option("file", o->file, "The kjit file to merge into")->required();
  merge->add_flag("--trust-binaries", o->trust_binaries,
                  "Also copy this cache's compiled kernels (authenticated with FILE's key)");
  CLI::App* clear = sub("clear", "Delete everything (or only the binaries)", run_clear, true);
  clear->add_flag("--yes", o->yes, "Really delete");
  clear->add_flag("--binaries-only", o->binaries_only, "Keep tunings, trials and devices");
  sub("vacuum", "Give free pages back to the file system", run_vacuum, true);
}

}  // namespace

KJIT_REGISTER_COMMAND(80, add_cache_command);

}  // namespace kjit::cli
