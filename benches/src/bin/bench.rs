//! Times every benchmark case on ExCubecl, on burn-cubecl and (where it makes sense) on
//! burn-ndarray, and prints a markdown table.
//!
//! ```text
//! bench [--filter TEXT] [--size small|full] [--iters N] [--warmup N] [--tune]
//!       [--gpu NAME] [--date YYYY-MM-DD] [--out FILE] [--torch FILE]
//! ```
//! `--filter` keeps the cases whose `"name size"` contains TEXT, or one of its `|`-separated
//! alternatives (`--filter "add|sum"`); `--size small` (the default
//! on wgpu) runs sizes a software rasteriser can take, `--size full` (the default on CUDA)
//! sizes that fill a GPU; `--tune` adds tiling variants of our kernels. `--gpu` names the
//! device as `nvidia-smi` does, which picks the datasheet peaks of the floor column (H100,
//! H200); `--out` also writes the report (device, date, commit and the table) to FILE.
//! `--torch` adds a `PyTorch (ms)` column and its speed-up over ours from the JSON object
//! (row key `"name size"` to median milliseconds) that `benches/torch_rows.py` writes,
//! measured on the same device beforehand with the same timing (`scripts/bench_gpu.sh` runs
//! both); rows it has no time for show `-`.

fn main() {
    ex_cubecl_benches::cli::run(std::env::args().skip(1));
}
