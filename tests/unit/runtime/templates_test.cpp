// Every header under templates/ compiles on its own with NVRTC, for sm_90.
#include <gtest/gtest.h>

#include "kjit/runtime/cuda/nvrtc.h"
#include "kjit/templates/embedded.h"

namespace kjit {
namespace {

std::vector<cuda::SourceHeader> headers() {
  std::vector<cuda::SourceHeader> out;
  for (const TemplateHeader& t : embedded_templates()) out.push_back({t.name, t.content});
  return out;
}

TEST(Templates, AreEmbeddedUnderKjitPrefix) {
  ASSERT_FALSE(embedded_templates().empty());
  EXPECT_NE(find_template("kjit/types.cuh"), nullptr);
  EXPECT_NE(find_template("kjit/demo.cuh"), nullptr);
  EXPECT_EQ(find_template("kjit/missing.cuh"), nullptr);
  for (const TemplateHeader& t : embedded_templates()) EXPECT_EQ(t.name.rfind("kjit/", 0), 0u);
}

TEST(Templates, EachCompilesAloneWithoutSpills) {
  for (const TemplateHeader& t : embedded_templates()) {
    SCOPED_TRACE(t.name);
    std::string source = "#include \"" + t.name + "\"\n";
    cuda::CompiledProgram p = cuda::nvrtc_compile(source, "template_check.cu", {}, headers());
    for (const cuda::KernelStats& k : p.kernels) EXPECT_EQ(k.spill_store_bytes, 0) << k.name;
  }
}

}  // namespace
}  // namespace kjit
