//! `cargo bench -p ex_cubecl_benches` runs every case (small sizes on wgpu, full sizes with
//! the `cuda` feature); arguments after `--` go to the command line of `bench`
//! (`cargo bench -p ex_cubecl_benches -- --filter matmul`).

fn main() {
    ex_cubecl_benches::cli::run(std::env::args().skip(1));
}
