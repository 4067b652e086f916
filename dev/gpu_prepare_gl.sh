#!/usr/bin/env bash
# The lent H100 machine's NVIDIA Vulkan ICD loads through libGLX_nvidia, which needs the glvnd libraries its
# image lacks; without them wgpu finds no Vulkan adapter ("Could not get 'vkCreateInstance'"). Run once per
# checkout after ../shared/gpu/prepare.sh; device runs then carry [".gpu", ".gl"] and start with
#   for f in .gl/*.deb; do dpkg -x $f /; done; source .gpu/bootstrap.sh
#   export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .gl /tmp/amd64/partial
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
[ -n "$(ls .gl/*.deb 2>/dev/null)" ] && exit 0
apt-get $o update >/dev/null
(cd .gl && apt-get $o download libglvnd0 libegl1 libgl1 libglx0 libopengl0 libgles2 >/dev/null)
ls .gl
