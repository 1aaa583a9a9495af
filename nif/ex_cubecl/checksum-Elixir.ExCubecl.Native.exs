# rustler_precompiled's checksums of this version's precompiled NIFs (artifact name =>
# "sha256:<hex>"), which ExCubecl.Native checks every download against. Written at release
# time by `scripts/release_nif.sh --checksums-only DIR` over the artifacts of every target
# (.github/workflows/release.yml gathers them), before `mix hex.publish`. Empty until the first
# release: a package built from this file finds no precompiled NIF and says so.
%{}
