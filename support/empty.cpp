// Keeps a library with no sources yet valid for CMake.
