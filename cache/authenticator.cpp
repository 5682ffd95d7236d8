#include "kjit/cache/authenticator.h"

#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "kjit/cache/trust.h"

namespace kjit::cache::detail {

namespace {

// Bump when what the MAC covers changes: every stored binary then fails and is
// recompiled.
constexpr std::string_view kMacFormat = "kjit-binary-mac-1";

[[noreturn]] void fail(const std::string& message) {
  throw std::runtime_error(message);
}

std::array<unsigned char, Authenticator::kSecretBytes> random_secret() {
  std::array<unsigned char, Authenticator::kSecretBytes> secret{};
  size_t done = 0;
  while (done < secret.size()) {
    ssize_t got = ::getrandom(secret.data() + done, secret.size() - done, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(fmt::format("cannot get random bytes for the key: {}", std::strerror(errno)));
    done += static_cast<size_t>(got);
  }
  return secret;
}

// Reads the key at `path`; false when there is none.
bool read_key(const std::string& path,
              std::array<unsigned char, Authenticator::kSecretBytes>& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    if (errno == ELOOP)
      fail(fmt::format(
          "{} is a symbolic link; kjit never follows links in its cache. Fix: remove it", path));
    fail(fmt::format("cannot read the cache's key {}: {}", path, std::strerror(errno)));
  }
  struct stat info {};
  std::string problem;
  if (::fstat(fd, &info) != 0) {
    problem = fmt::format("cannot read the cache's key {}: {}", path, std::strerror(errno));
  } else {
    problem = file_distrust(path, info, /*private_file=*/true);
    if (problem.empty() && info.st_size != static_cast<off_t>(out.size()))
      problem = fmt::format(
          "{} is not a kjit key ({} bytes, not {}). Fix: remove it (kjit makes a new one; stored "
          "binaries are then recompiled)",
          path, info.st_size, out.size());
  }
  if (problem.empty() && ::read(fd, out.data(), out.size()) != static_cast<ssize_t>(out.size()))
    problem = fmt::format("cannot read the cache's key {}: {}", path, std::strerror(errno));
  ::close(fd);
  if (!problem.empty()) fail(problem);
  return true;
}

// Writes a fresh key under a temporary name and links it into place: link()
// never replaces an existing file, so when several processes create the key at
// once, exactly one secret wins and everyone reads that one, whole.
void create_key(const std::string& path) {
  std::array<unsigned char, Authenticator::kSecretBytes> secret = random_secret();
  const std::string temporary =
      fmt::format("{}.tmp-{}-{:02x}{:02x}", path, ::getpid(), secret[0], secret[1]);
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) fail(fmt::format("cannot create the cache's key {}: {}", path, std::strerror(errno)));
  ::fchmod(fd, 0600);  // whatever the umask
  bool written = ::write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size()) &&
                 ::fsync(fd) == 0;
  int write_error = errno;
  ::close(fd);
  int linked = written ? ::link(temporary.c_str(), path.c_str()) : -1;
  int link_error = errno;
  ::unlink(temporary.c_str());
  OPENSSL_cleanse(secret.data(), secret.size());
  if (!written)
    fail(fmt::format("cannot write the cache's key {}: {}", path, std::strerror(write_error)));
  if (linked != 0 && link_error != EEXIST)
    fail(fmt::format("cannot create the cache's key {}: {}", path, std::strerror(link_error)));
}

}  // namespace

struct Authenticator::Context {
  EVP_MAC* algorithm = nullptr;
  EVP_MAC_CTX* keyed = nullptr;  // initialized with the secret; duplicated per MAC
  ~Context() {
    EVP_MAC_CTX_free(keyed);
    EVP_MAC_free(algorithm);
  }
};

std::unique_ptr<Authenticator> Authenticator::from_key_file(const std::string& path) {
  std::array<unsigned char, kSecretBytes> secret{};
  if (!read_key(path, secret)) {
    create_key(path);
    if (!read_key(path, secret)) fail(fmt::format("the cache's key {} vanished", path));
  }
  auto authenticator = std::make_unique<Authenticator>(secret);
  OPENSSL_cleanse(secret.data(), secret.size());
  return authenticator;
}

Authenticator::Authenticator(const std::array<unsigned char, kSecretBytes>& secret)
    : context_(std::make_unique<Context>()) {
  context_->algorithm = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (context_->algorithm != nullptr) context_->keyed = EVP_MAC_CTX_new(context_->algorithm);
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  if (context_->keyed == nullptr ||
      EVP_MAC_init(context_->keyed, secret.data(), secret.size(), params) != 1)
    fail("OpenSSL has no HMAC-SHA256");
}

Authenticator::~Authenticator() = default;

std::string Authenticator::mac(std::string_view key, std::string_view cubin) const {
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_dup(context_->keyed);
  if (ctx == nullptr) fail("OpenSSL could not start an HMAC");
  bool ok = true;
  auto part = [&](std::string_view bytes) {
    unsigned char length[8];
    for (int i = 0; i < 8; ++i)
      length[i] = static_cast<unsigned char>(uint64_t{bytes.size()} >> (8 * i));
    ok = ok && EVP_MAC_update(ctx, length, sizeof length) == 1 &&
         EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()) ==
             1;
  };
  part(kMacFormat);
  part(key);
  part(cubin);
  unsigned char tag[EVP_MAX_MD_SIZE];
  size_t tag_bytes = 0;
  ok = ok && EVP_MAC_final(ctx, tag, &tag_bytes, sizeof tag) == 1;
  EVP_MAC_CTX_free(ctx);
  if (!ok) fail("OpenSSL could not compute an HMAC");
  std::string hex;
  for (size_t i = 0; i < tag_bytes; ++i) hex += fmt::format("{:02x}", tag[i]);
  return hex;
}

bool Authenticator::verify(std::string_view key, std::string_view cubin,
                           std::string_view stored) const {
  const std::string expected = mac(key, cubin);
  return stored.size() == expected.size() &&
         CRYPTO_memcmp(stored.data(), expected.data(), expected.size()) == 0;
}

}  // namespace kjit::cache::detail
