#include <doctest/doctest.h>

#include "core/kernels/kernels.h"

TEST_CASE("sgemm_ref multiplies a 2x2 by a 2x2") {
  const float a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8};
  float c[4];
  tg::kernels::sgemm_ref(2, 2, 2, a, 2, 1, b, 2, 1, 0.f, c, 2);
  CHECK(c[0] == 19); CHECK(c[1] == 22); CHECK(c[2] == 43); CHECK(c[3] == 50);
}
