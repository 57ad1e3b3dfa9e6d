# Sourced first by an experiment's script: `here`, the script's folder, and `root`, the repository.
here="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
