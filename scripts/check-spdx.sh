#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Every file git tracks that can carry a comment names its license in an SPDX line within its
# first three lines (LICENSE says which files cannot); prints the ones that do not.
set -euo pipefail
cd "$(dirname "$0")/.."
want='SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause'
bad=0
while IFS= read -r f; do
	case "$f" in
	LICENSE | LICENSES/* | *.json | tests/fuzz/seeds/* | .clang-format | deploy/debian/conffiles) continue ;;
	esac
	if ! head -n 3 "$f" | grep -qF "$want"; then
		echo "no SPDX line: $f" >&2
		bad=1
	fi
done < <(git ls-files --cached)
exit $bad
