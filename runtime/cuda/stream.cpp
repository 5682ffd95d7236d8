#include "kjit/runtime/cuda/stream.h"

#include "kjit/runtime/cuda/driver.h"

namespace kjit::cuda {

Stream::Stream() {
  KJIT_CU(cuStreamCreate, &stream_, CU_STREAM_NON_BLOCKING);
}
Stream::~Stream() {
  if (stream_) Driver::get().api().cuStreamDestroy(stream_);
}
void Stream::synchronize() const {
  KJIT_CU(cuStreamSynchronize, stream_);
}

Event::Event() {
  KJIT_CU(cuEventCreate, &event_, CU_EVENT_DEFAULT);
}
Event::~Event() {
  if (event_) Driver::get().api().cuEventDestroy(event_);
}
void Event::record(CUstream stream) {
  KJIT_CU(cuEventRecord, event_, stream);
}
void Event::synchronize() const {
  KJIT_CU(cuEventSynchronize, event_);
}
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  KJIT_CU(cuEventElapsedTime, &ms, start.event_, event_);
  return ms;
}

}  // namespace kjit::cuda
