// Streams and events (RAII). Launches are asynchronous on the caller's stream;
// events time device work without host clocks.
#pragma once

#include <cuda.h>

namespace kjit::cuda {

class Stream {
 public:
  Stream();  // a new non-blocking stream
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const { return stream_; }
  void synchronize() const;

 private:
  CUstream stream_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent get() const { return event_; }
  void record(CUstream stream = nullptr);
  void synchronize() const;
  // Milliseconds from `start` to this event; both must have completed.
  float elapsed_ms_since(const Event& start) const;

 private:
  CUevent event_ = nullptr;
};

}  // namespace kjit::cuda
