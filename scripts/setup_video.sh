#!/usr/bin/env bash
# FFmpeg's libraries for the NIF's `video` feature (ExCubecl.Video, ExCubecl.Transcode):
# libavcodec, libavformat, libavutil and libswscale with their headers (Debian 12: FFmpeg
# 5.1), pkg-config to find them and libclang for ffmpeg-sys-next's bindgen, installed with apt
# where missing, as scripts/setup.sh installs lavapipe. Then the Elixir packages build the NIF
# with the feature: EX_CUBECL_FEATURES gets `video` (default `wgpu,video`). Sourced by
# scripts/test.sh after scripts/setup.sh; safe to run again. EX_CUBECL_NO_VIDEO=1 skips it
# (the NIF is then built without video, and ExCubecl.Video answers an error saying so).
set -euo pipefail

if [ -z "${EX_CUBECL_NO_VIDEO:-}" ]; then
    has_ffmpeg_dev() {
        command -v pkg-config >/dev/null &&
            pkg-config --exists 'libavcodec >= 59' 'libavformat >= 59' 'libavutil >= 57' 'libswscale >= 6' &&
            { ls /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/x86_64-linux-gnu/libclang*.so* /usr/lib/aarch64-linux-gnu/libclang*.so* 2>/dev/null || true; } | grep . >/dev/null
    }
    if ! has_ffmpeg_dev && command -v apt-get >/dev/null; then
        echo "ex_cubecl: installing FFmpeg's libraries and libclang for the video feature" >&2
        SUDO=""
        if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
            pkg-config libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libclang-dev >/dev/null
    fi
    if has_ffmpeg_dev; then
        case ",${EX_CUBECL_FEATURES:-wgpu}," in
            *,video,*) ;;
            *) export EX_CUBECL_FEATURES="${EX_CUBECL_FEATURES:-wgpu},video" ;;
        esac
    else
        echo "ex_cubecl: FFmpeg's libraries (5.1 or later) are missing: the NIF is built without video" >&2
    fi
fi
