#include "kjit/support/error.h"

#include <utility>

namespace kjit {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::User:
      return "user error";
    case ErrorKind::Compile:
      return "compile error";
    case ErrorKind::Cuda:
      return "CUDA error";
    case ErrorKind::Cache:
      return "cache error";
    case ErrorKind::Internal:
      return "internal error";
  }
  return "error";
}

namespace {
std::string with_hint(const std::string& message, const std::string& hint) {
  return hint.empty() ? message : message + " (hint: " + hint + ")";
}
}  // namespace

UserError::UserError(const std::string& message, const std::string& hint)
    : Error(ErrorKind::User, with_hint(message, hint)), hint_(hint) {}

CompileError::CompileError(const std::string& message, std::string log, std::string source,
                           std::vector<std::string> options)
    : Error(ErrorKind::Compile, message),
      log_(std::move(log)),
      source_(std::move(source)),
      options_(std::move(options)) {}

CudaError::CudaError(std::string call, int code, std::string code_name,
                     const std::string& description)
    : Error(ErrorKind::Cuda,
            call + " failed: " + code_name + " (" + std::to_string(code) + "): " + description),
      call_(std::move(call)),
      code_(code),
      code_name_(std::move(code_name)) {}

}  // namespace kjit
