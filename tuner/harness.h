// What the tuner needs from a family to measure its configs on a GPU. The
// runtime implements it per family (runtime/tuning.cpp), compiling through
// Runtime::compile (so every binary lands in the store) and launching exactly as
// the family's Kernel does. It owns its inputs and a scratch output: tuning never
// touches a caller's buffers.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>

#include "kjit/tuner/check.h"
#include "kjit/tuner/family.h"
#include "kjit/tuner/model.h"

namespace kjit::tuner {

// One config, compiled and loaded.
class Trial {
 public:
  virtual ~Trial() = default;
  // Launches once on `stream`, reading input set `set` (of Harness::input_sets())
  // and writing the harness's scratch output.
  virtual void launch(CUstream stream, int set) = 0;
  // What the compiled kernel asks of an SM (ptxas' report).
  virtual KernelResources resources() const = 0;
};

class Harness {
 public:
  virtual ~Harness() = default;
  virtual const TuningProblem& problem() const = 0;
  // Copies of the inputs that launches rotate through (several when one set would
  // sit in L2).
  virtual int input_sets() const = 0;
  // Compiles and loads `config`. Throws kjit::Error when the config cannot run here
  // (too many registers, a compile error...): the message is the trial's error.
  virtual std::unique_ptr<Trial> prepare(const std::string& config) = 0;
  // Fills the scratch output with NaN bytes, so an element nobody writes fails the check.
  virtual void poison(CUstream stream) = 0;
  // Compares the scratch output (after a launch on input set 0 has finished) with
  // the fp64 reference.
  virtual CheckOutcome check() = 0;
};

}  // namespace kjit::tuner
