// Binds each stored binary to its key with a MAC that only this user can make,
// so that a row someone else wrote (planted in a store that was writable by
// others, or copied in from elsewhere) or a row whose cubin was swapped for
// another's fails verification and is never loaded.
//
// The MAC is HMAC-SHA256 (OpenSSL) over a format tag, the binary's key and its
// cubin, each length-prefixed. Its secret is 32 random bytes in a file beside
// the store (kjit.db.key), created with mode 0600 and refused when anyone else
// owns it or may read it. Not part of the cache's interface.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>

namespace kjit::cache::detail {

class Authenticator {
 public:
  // Bytes of the secret.
  static constexpr size_t kSecretBytes = 32;

  // The secret in the file at `path`, which is created (atomically, so that
  // processes that start together agree on one secret) when missing. Throws
  // std::runtime_error saying what is wrong with the file and how to fix it.
  static std::unique_ptr<Authenticator> from_key_file(const std::string& path);
  // For tests: a given secret.
  explicit Authenticator(const std::array<unsigned char, kSecretBytes>& secret);
  ~Authenticator();
  Authenticator(const Authenticator&) = delete;
  Authenticator& operator=(const Authenticator&) = delete;

  // 64 lowercase hex digits.
  std::string mac(std::string_view key, std::string_view cubin) const;
  // Whether `mac` is mac(key, cubin) (compared in constant time).
  bool verify(std::string_view key, std::string_view cubin, std::string_view mac) const;

 private:
  struct Context;
  std::unique_ptr<Context> context_;
};

}  // namespace kjit::cache::detail
