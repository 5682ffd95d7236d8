// The template headers under templates/, embedded at build time (see
// cmake/EmbedTemplates.cmake). Generated code includes them as "kjit/<file>.cuh".
#pragma once

#include <string>
#include <vector>

namespace kjit {

struct TemplateHeader {
  std::string name;     // include name, e.g. "kjit/types.cuh"
  std::string content;  // the file's text
};

// Every header under templates/, sorted by name.
const std::vector<TemplateHeader>& embedded_templates();

// The header with this include name, or nullptr.
const TemplateHeader* find_template(const std::string& name);

}  // namespace kjit
