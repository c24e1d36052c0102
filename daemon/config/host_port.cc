// SplitHostPort (see host_port.h).
#include "daemon/config/host_port.h"

#include <string>

namespace kvtier::kvtierd {

bool SplitHostPort(const std::string& text, std::string* host, uint32_t* port,
                   bool allow_empty_host) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || (colon == 0 && !allow_empty_host)) return false;
  *host = text.substr(0, colon);
  const bool bracketed = !host->empty() && (*host)[0] == '[';
  if (!host->empty() && (bracketed != (host->back() == ']') || (bracketed && host->size() < 3) ||
                         (!bracketed && host->find(':') != std::string::npos))) {
    return false;
  }
  const std::string digits = text.substr(colon + 1);
  if (digits.empty() || digits.size() > 5 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *port = static_cast<uint32_t>(std::stoul(digits));
  return *port <= 65535;
}

}  // namespace kvtier::kvtierd
