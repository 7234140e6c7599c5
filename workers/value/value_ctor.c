/* value_ctor.c - the value constructors of value.h and tensor.h, exported
 * out of line for callers that cannot expand a static inline (ctypes, cffi,
 * dlsym). DISCO_VALUE_OUT_OF_LINE, defined before the first include, makes
 * the headers' definitions external ones here: one body per constructor. */
#define DISCO_VALUE_OUT_OF_LINE 1

#include "disco/tensor.h"
#include "disco/value.h"
