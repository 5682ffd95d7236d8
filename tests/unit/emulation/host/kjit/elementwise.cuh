// Host emulation: the real template, over the host stand-in for kjit/types.cuh.
#pragma once
#include "kjit/templates/elementwise.cuh"
