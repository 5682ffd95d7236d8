#include "kjit/tuner/model.h"

#include <algorithm>
#include <cmath>

namespace kjit::tuner {

Occupancy occupancy(const KernelResources& r, const cuda::DeviceProperties& device) {
  Occupancy o;
  constexpr int kHuge = 1 << 20;
  const int threads = std::max(r.threads, 1);
  const int max_threads = device.max_threads_per_sm > 0 ? device.max_threads_per_sm : 2048;
  o.by_threads = max_threads / threads;
  // Registers are allocated per warp in units of 256 (8 per thread).
  const int64_t per_thread = (std::max(r.registers, 1) + 7) / 8 * 8;
  const int64_t per_block = per_thread * ((threads + 31) / 32 * 32);
  const int64_t registers = device.registers_per_sm > 0 ? device.registers_per_sm : 65536;
  o.by_registers = r.registers > 0 ? static_cast<int>(registers / per_block) : kHuge;
  // Each block also reserves 1 KiB of shared memory for the system.
  const int64_t shared = device.shared_per_sm > 0 ? device.shared_per_sm : 233472;
  o.by_shared = r.shared_bytes > 0 ? static_cast<int>(shared / (r.shared_bytes + 1024)) : kHuge;
  o.by_blocks = device.max_blocks_per_sm > 0 ? device.max_blocks_per_sm : 32;
  o.blocks_per_sm = std::min({o.by_threads, o.by_registers, o.by_shared, o.by_blocks});
  // Every resource that allows no more (ties are named together).
  const std::pair<int, const char*> limits[] = {{o.by_shared, "shared memory"},
                                                {o.by_registers, "registers"},
                                                {o.by_threads, "threads"},
                                                {o.by_blocks, "blocks per SM"}};
  for (const auto& [blocks, name] : limits)
    if (blocks == o.blocks_per_sm)
      o.limiter += (o.limiter.empty() ? "" : " and ") + std::string(name);
  o.blocks_per_sm = std::max(o.blocks_per_sm, 0);
  return o;
}

double Waves::utilization() const {
  return waves > 0 && slots > 0 ? static_cast<double>(units) / (static_cast<double>(waves) * slots)
                                : 0;
}

Waves waves_of(int64_t units, int64_t slots) {
  Waves w;
  w.units = units;
  w.slots = std::max<int64_t>(slots, 1);
  w.waves = (units + w.slots - 1) / w.slots;
  w.last_fill = w.waves > 0 ? static_cast<double>(units - (w.waves - 1) * w.slots) / w.slots : 0;
  return w;
}

double DeviceRates::ridge() const {
  return dram_bytes_per_s > 0 ? tensor_peak() / dram_bytes_per_s : 0;
}

DeviceRates rates_of(const cuda::DeviceProperties& device) {
  DeviceRates r;
  r.sms = std::max(device.sm_count, 1);
  r.sm_clock_hz = (device.sm_clock_khz > 0 ? device.sm_clock_khz : 1980000) * 1e3;
  const double theoretical = device.theoretical_bandwidth_gbs() * 1e9;
  r.dram_bytes_per_s = 0.9 * (theoretical > 0 ? theoretical : 4.8e12);
  r.l2_bytes_per_s = kL2BytesPerSmClock * r.sms * r.sm_clock_hz;
  const int cc = device.cc_major * 10 + device.cc_minor;
  r.tensor_flops_per_sm_clock = cc >= 90 ? 4096 : cc >= 80 ? 2048 : 1024;
  r.simt_flops_per_sm_clock = 256;
  return r;
}

double Efficiencies::get(const std::string& key, double prior) const {
  auto it = values_.find(key);
  return it == values_.end() ? prior : it->second.value;
}

void Efficiencies::set(const std::string& key, double value, int samples) {
  values_[key] = {value, samples};
}

}  // namespace kjit::tuner
