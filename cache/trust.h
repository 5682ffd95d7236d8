// Whether the store's files can be trusted to hold code this user compiled.
// kjit runs the cubins it finds in the store inside the caller's process, so a
// file another user can write is a way into that process. As git's
// safe.directory and ssh's StrictModes do, the store checks who owns its
// directory (and every directory above it) and who may write there, and
// refuses to load compiled code when anyone else could have put it there.
// Not part of the cache's interface.
#pragma once

#include <sys/stat.h>

#include <string>

namespace kjit::cache::detail {

// Why code from the directory `directory` (an absolute path without symbolic
// links, as realpath() gives) cannot be trusted, with the fix; "" when it can.
// The directory must belong to this user and be writable by nobody else; each
// directory above it must belong to this user or to root and be writable by
// nobody else, unless it is sticky (as /tmp is: others cannot rename or
// remove what is not theirs there).
std::string directory_distrust(const std::string& directory);

// The same for a file in that directory, from its lstat()/fstat() `info`: a
// regular file of this user's that nobody else may write (`private_file`:
// nobody else may read it either, as for the secret key).
std::string file_distrust(const std::string& path, const struct stat& info,
                          bool private_file = false);

}  // namespace kjit::cache::detail
