// Typed errors. Library code never calls exit(): it throws one of these, and the
// CLI turns them into a message and an exit code.
//
//   UserError     the caller asked for something invalid; the message says what and how to fix it
//   CompileError  NVRTC rejected generated or user source; carries the log and the source
//   CudaError     a driver call failed; carries the call, the error name and the driver's message
//   CacheError    the on-disk store failed in a way the caller must hear about
//   InternalError a kjit bug: an invariant did not hold
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace kjit {

enum class ErrorKind { User, Compile, Cuda, Cache, Internal };

const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

class UserError : public Error {
 public:
  // `hint` (may be empty) says what to do about it; it is appended to what().
  explicit UserError(const std::string& message, const std::string& hint = "");
  const std::string& hint() const { return hint_; }

 private:
  std::string hint_;
};

class CompileError : public Error {
 public:
  CompileError(const std::string& message, std::string log, std::string source,
               std::vector<std::string> options);
  const std::string& log() const { return log_; }
  const std::string& source() const { return source_; }
  const std::vector<std::string>& options() const { return options_; }

 private:
  std::string log_;
  std::string source_;
  std::vector<std::string> options_;
};

class CudaError : public Error {
 public:
  CudaError(std::string call, int code, std::string code_name, const std::string& description);
  const std::string& call() const { return call_; }
  int code() const { return code_; }
  const std::string& code_name() const { return code_name_; }

 private:
  std::string call_;
  int code_;
  std::string code_name_;
};

class CacheError : public Error {
 public:
  explicit CacheError(const std::string& message) : Error(ErrorKind::Cache, message) {}
};

class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message)
      : Error(ErrorKind::Internal, "internal error (a kjit bug, please report): " + message) {}
};

// Checks an invariant that only a kjit bug can break.
#define KJIT_CHECK(cond, msg)                                                              \
  do {                                                                                     \
    if (!(cond))                                                                           \
      throw ::kjit::InternalError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                  ": " #cond ": " + (msg));                                \
  } while (0)

}  // namespace kjit
