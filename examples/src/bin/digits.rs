//! Trains an MLP and a small CNN on the 8×8 handwritten digits with Burn on ExCubecl, then
//! saves, reloads and checks them; `--export-data PATH` writes the split it trains on as a Burn
//! record for the Elixir job instead. `digits --help` lists the options.
fn main() {
    if let Err(failure) = ex_cubecl_examples::cli::main(std::env::args().skip(1)) {
        eprintln!("{}", failure.message);
        std::process::exit(failure.code);
    }
}
