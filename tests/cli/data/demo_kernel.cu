// A user's source may include kjit's templates.
#include "kjit/demo.cuh"
