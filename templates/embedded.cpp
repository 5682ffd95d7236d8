#include "kjit/templates/embedded.h"

namespace kjit {

const TemplateHeader* find_template(const std::string& name) {
  for (const TemplateHeader& header : embedded_templates())
    if (header.name == name) return &header;
  return nullptr;
}

}  // namespace kjit
