#!/usr/bin/env bash
# Restores benchmarks/experiments/data/sessions_1-54.tar.xz, the recorded data of sessions 1-54, from git history.
# Session 55 took it out of the tree (the device carries the tree with the DSL's payload, at most 64 MiB in all);
# the file is unchanged at commit b1bdf5c. It is git-ignored once restored. Needs a clone with that commit.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
git -C "$here" show b1bdf5c:benchmarks/experiments/data/sessions_1-54.tar.xz > "$here/sessions_1-54.tar.xz"
echo "restored $here/sessions_1-54.tar.xz; unpack: tar xJf $here/sessions_1-54.tar.xz -C $here"
