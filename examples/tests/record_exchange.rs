//! Burn's record files (`NamedMpkFileRecorder<FullPrecisionSettings>`) between Burn's own
//! recorder and the NIF's reader and writer (`ex_cubecl_nif::record`), on the digits job's
//! modules: Burn-written files read with the same names and values, NIF-written files load into
//! `Mlp` and `Cnn`, the two layouts agree, corrupt files are errors; the Elixir fixture; the
//! exported data set.
use std::path::{Path, PathBuf};

use burn_core::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn_tensor::backend::Backend;
use burn_tensor::{DType, Tensor, TensorData};
use ex_cubecl_examples::data::{Digits, PIXELS, Split};
use ex_cubecl_examples::export::export_data;
use ex_cubecl_examples::model::{Classifier, Cnn, Mlp};
use ex_cubecl_examples::train::{load, save};
use ex_cubecl_record::mpk::{self, Value};
use ex_cubecl_record::{self as record, Metadata, Record, format};

type B = ex_cubecl::ExWgpu;

/// Every float parameter of a module by dotted path, with its data.
#[derive(Default)]
struct Named {
    path: Vec<String>,
    out: Vec<(String, TensorData)>,
}

impl ModuleVisitor<B> for Named {
    fn enter_module(&mut self, name: &str, _container: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.out.push((self.path.join("."), param.val().into_data()));
    }
}

fn params<M: Module<B>>(module: &M) -> Vec<(String, TensorData)> {
    let mut named = Named::default();
    module.visit(&mut named);
    named.out
}

/// The fixtures' values: element `k` of the `p`-th parameter is `((7k + 13p) mod 97 - 48) / 256`,
/// exact in every float type (so the Elixir test recomputes them exactly).
fn formula(p: usize, n: usize) -> Vec<f32> {
    (0..n).map(|k| (((k * 7 + p * 13) % 97) as f32 - 48.0) / 256.0).collect()
}

/// Sets every float parameter to [`formula`], numbering them in visiting order.
#[derive(Default)]
struct Formula(usize);

impl ModuleMapper<B> for Formula {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let p = self.0;
        self.0 += 1;
        param.map(|t| {
            let (shape, device) = (t.shape(), t.device());
            let values = formula(p, shape.num_elements());
            Tensor::from_data(TensorData::new(values, shape), &device)
        })
    }
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ex_cubecl_record_{}_{name}.mpk", std::process::id()))
}

fn assert_same(got: &[(String, TensorData)], expected: &[(String, TensorData)]) {
    let names = |v: &[(String, TensorData)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(got), names(expected));
    for ((name, a), (_, b)) in got.iter().zip(expected) {
        assert_eq!(a.shape, b.shape, "{name}: shape");
        assert_eq!(a.dtype, b.dtype, "{name}: dtype");
        assert_eq!(a.as_bytes(), b.as_bytes(), "{name}: values");
    }
}

/// A model saved with Burn's recorder reads back through the NIF's reader with Burn's
/// metadata, every parameter by its path, and the same bits.
fn burn_written_reads_back<M: Classifier<B>>(name: &str) {
    let device = Default::default();
    B::seed(&device, 11);
    let model = M::init(&device);
    let expected = params(&model);
    let path = save(model, &temp(name)).expect("Burn saves");
    let record = record::read_file(&path).expect("the NIF reads Burn's file");
    let _ = std::fs::remove_file(&path);
    assert_eq!(record.metadata, Metadata::burn(), "the metadata strings Burn 0.21 writes");
    assert_same(&record.params, &expected);
}

#[test]
fn burn_written_mlp_reads_back_with_the_same_values() {
    burn_written_reads_back::<Mlp<B>>("read_mlp");
    let record = record::read_file(&fixture()).expect("the fixture reads");
    let names: Vec<_> = record.params.iter().map(|(n, d)| (n.as_str(), d.shape.as_slice().to_vec())).collect();
    assert_eq!(
        names,
        [
            ("hidden1.weight", vec![64, 128]),
            ("hidden1.bias", vec![128]),
            ("hidden2.weight", vec![128, 64]),
            ("hidden2.bias", vec![64]),
            ("output.weight", vec![64, 10]),
            ("output.bias", vec![10]),
        ]
    );
}

#[test]
fn burn_written_cnn_reads_back_with_the_same_values() {
    burn_written_reads_back::<Cnn<B>>("read_cnn");
}

/// Parameters written by the NIF's writer (of `dtype`) load into a fresh model with Burn's
/// recorder, converted to its f32 without loss.
fn nif_written_loads<M: Classifier<B>>(name: &str, dtype: DType) {
    let device = Default::default();
    let fresh = M::init(&device);
    let entries: Vec<(String, TensorData)> = params(&fresh)
        .into_iter()
        .enumerate()
        .map(|(p, (name, data))| (name, TensorData::new(formula(p, data.num_elements()), data.shape)))
        .collect();
    let written = entries.iter().map(|(n, d)| (n.clone(), d.clone().convert_dtype(dtype))).collect();
    let path = temp(name);
    record::write_file(&path, &Record { metadata: Metadata::burn(), params: written }).expect("the NIF writes");
    let loaded = load(M::init(&device), &path, &device).expect("Burn loads the NIF's file");
    let _ = std::fs::remove_file(&path);
    assert_same(&params(&loaded), &entries);
}

#[test]
fn nif_written_params_load_into_mlp_and_cnn() {
    nif_written_loads::<Mlp<B>>("write_mlp", DType::F32);
    nif_written_loads::<Mlp<B>>("write_mlp_f64", DType::F64);
    nif_written_loads::<Mlp<B>>("write_mlp_f16", DType::F16);
    nif_written_loads::<Cnn<B>>("write_cnn", DType::F32);
}

/// `value` with every parameter id replaced by `"id"` and every nil field dropped; the nil
/// fields' paths go to `nils`.
fn normalise<'a>(value: &Value<'a>, path: &str, nils: &mut Vec<String>) -> Value<'a> {
    match value {
        Value::Map(pairs) => Value::Map(
            pairs
                .iter()
                .filter_map(|(k, v)| {
                    let key = k.as_str().expect("string keys");
                    let sub = if path.is_empty() { key.to_string() } else { format!("{path}.{key}") };
                    match (key, v) {
                        (_, Value::Nil) => {
                            nils.push(sub);
                            None
                        }
                        ("id", Value::Str(_)) => Some((k.clone(), Value::str("id"))),
                        _ => Some((k.clone(), normalise(v, &sub, nils))),
                    }
                })
                .collect(),
        ),
        Value::Array(items) => {
            Value::Array(items.iter().enumerate().map(|(i, v)| normalise(v, &format!("{path}.{i}"), nils)).collect())
        }
        other => other.clone(),
    }
}

/// The same model written by Burn and by the NIF: the same tree once ids are blanked, except
/// for the nil fields Burn writes for its constant records (listed here: what Burn writes for
/// `Relu`, `MaxPool2d` and `Conv2d`'s plain fields), which the NIF leaves out and Burn's loader
/// reads as absent.
fn layouts_agree<M: Classifier<B>>(name: &str, burn_nils_expected: &[&str]) {
    let device = Default::default();
    let model = M::init(&device);
    let entries = params(&model);
    let burn_path = save(model, &temp(&format!("{name}_burn"))).expect("Burn saves");
    let nif_path = temp(&format!("{name}_nif"));
    record::write_file(&nif_path, &Record { metadata: Metadata::burn(), params: entries }).expect("the NIF writes");
    let (burn, nif) = (std::fs::read(&burn_path).unwrap(), std::fs::read(&nif_path).unwrap());
    let _ = (std::fs::remove_file(&burn_path), std::fs::remove_file(&nif_path));
    let (mut burn_nils, mut nif_nils) = (Vec::new(), Vec::new());
    let burn_tree = normalise(&mpk::decode(&burn).unwrap(), "", &mut burn_nils);
    let nif_tree = normalise(&mpk::decode(&nif).unwrap(), "", &mut nif_nils);
    assert_eq!(burn_tree, nif_tree, "{name}: Burn's layout and the NIF's differ");
    assert_eq!(burn_nils, burn_nils_expected, "{name}: the nil fields Burn writes");
    assert!(nif_nils.is_empty(), "{name}: the NIF wrote nil fields: {nif_nils:?}");
}

#[test]
fn nif_writer_lays_out_records_as_burn() {
    // Filled in from what Burn 0.21 writes (see the test's output on a mismatch).
    layouts_agree::<Mlp<B>>("layout_mlp", &["item.activation"]);
    layouts_agree::<Cnn<B>>("layout_cnn", &CNN_NILS);
}

/// The nil fields of Burn's `Cnn` record: its `Relu` and `MaxPool2d` (constant modules:
/// `EmptyRecord`) and the plain fields of each `Conv2d`.
const CNN_NILS: [&str; 12] = [
    "item.conv1.stride",
    "item.conv1.kernel_size",
    "item.conv1.dilation",
    "item.conv1.groups",
    "item.conv1.padding",
    "item.conv2.stride",
    "item.conv2.kernel_size",
    "item.conv2.dilation",
    "item.conv2.groups",
    "item.conv2.padding",
    "item.pool",
    "item.activation",
];

/// The writer's ids are Burn's `ParamId`s: base32 (DNSSEC) of 8 little-endian bytes, which
/// Burn's loader parses.
#[test]
fn param_ids_are_burns() {
    for v in [0u64, 1, 123_456, u64::MAX, 0x0123_4567_89ab_cdef] {
        assert_eq!(format::base32_dnssec(&v.to_le_bytes()), ParamId::from(v).serialize());
    }
    let path = temp("ids");
    let params = vec![
        ("a.b".to_string(), TensorData::new(vec![1.0f32], [1])),
        ("c".to_string(), TensorData::new(vec![2.0f32], [1])),
    ];
    record::write_file(&path, &Record { metadata: Metadata::burn(), params }).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let root = mpk::decode(&bytes).unwrap();
    let item = root.get("item").unwrap();
    let ids = [item.get("a").unwrap().get("b").unwrap().get("id"), item.get("c").unwrap().get("id")];
    let ids: Vec<&str> = ids.iter().map(|v| v.and_then(Value::as_str).unwrap()).collect();
    assert_ne!(ids[0], ids[1]);
    for id in ids {
        assert!(ParamId::try_deserialize(id).is_some(), "Burn can't parse id {id:?}");
    }
}

/// Missing, empty, truncated, foreign and malformed files are errors that name the file, and
/// never panics.
#[test]
fn corrupt_records_are_errors() {
    let device = Default::default();
    let good = save(Mlp::<B>::init(&device), &temp("corrupt")).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let _ = std::fs::remove_file(&good);
    let bad = temp("corrupt_bad");
    let read = |contents: &[u8]| {
        std::fs::write(&bad, contents).unwrap();
        record::read_file(&bad)
    };
    let expect_err = |result: Result<Record, String>, what: &str, needle: &str| {
        let err = result.err().unwrap_or_else(|| panic!("{what} was read"));
        assert!(err.contains(&bad.display().to_string()) || what == "missing", "{what}: {err}");
        assert!(err.contains(needle), "{what}: {err:?} doesn't say {needle:?}");
    };

    let missing = record::read_file(Path::new("/nonexistent/ex_cubecl/model.mpk"));
    assert!(
        missing.as_ref().is_err_and(|e| e.contains("/nonexistent/ex_cubecl/model.mpk") && e.contains("no such file")),
        "{missing:?}"
    );
    expect_err(read(b""), "empty", "empty");
    // Every cut of the real file: a handful of positions across it, and all of its first 300
    // bytes (the metadata and the first keys).
    let cuts = (1..300).chain((300..bytes.len()).step_by(bytes.len() / 50));
    for cut in cuts {
        expect_err(read(&bytes[..cut]), &format!("cut at {cut}"), "");
    }
    expect_err(read(b"{\"metadata\": {}, \"item\": {}}"), "JSON", "");
    expect_err(read(&[0xc1, 0, 0, 0]), "garbage", "");
    let mut long = bytes.clone();
    long.push(0xc0);
    expect_err(read(&long), "trailing byte", "after the end");

    // A parameter of a dtype the NIF doesn't hold, and one whose bytes don't fit its shape.
    let param = |bytes: &'static [u8], shape: Vec<Value<'static>>, dtype: Value<'static>| {
        let data = Value::Map(vec![
            (Value::str("bytes"), Value::Bin(bytes)),
            (Value::str("shape"), Value::Array(shape)),
            (Value::str("dtype"), dtype),
        ]);
        let leaf = Value::Map(vec![(Value::str("id"), Value::str("abc")), (Value::str("param"), data)]);
        let meta = Value::Map(
            Metadata::burn()
                .fields()
                .iter()
                .map(|(k, v)| (Value::str(k), Value::Str(v.as_bytes().to_vec().leak())))
                .collect(),
        );
        let root = Value::Map(vec![
            (Value::str("metadata"), meta),
            (Value::str("item"), Value::Map(vec![(Value::str("w"), leaf)])),
            (Value::str("_b"), Value::Array(vec![])),
        ]);
        let mut out = Vec::new();
        mpk::encode(&root, &mut out).unwrap();
        out
    };
    let quantized = Value::Map(vec![(Value::str("QFloat"), Value::Map(vec![]))]);
    expect_err(read(&param(&[0; 4], vec![Value::UInt(4)], quantized)), "QFloat", "unsupported dtype");
    expect_err(read(&param(&[0; 4], vec![Value::UInt(1)], Value::str("F8E4M3"))), "F8", "unsupported dtype \"F8E4M3\"");
    expect_err(
        read(&param(&[0; 6], vec![Value::UInt(2)], Value::str("F32"))),
        "short bytes",
        "needs 8 bytes, the record has 6",
    );
    assert!(read(&param(&[0; 8], vec![Value::UInt(2)], Value::str("F32"))).is_ok(), "the well-formed variant reads");
    let _ = std::fs::remove_file(&bad);
}

/// The fixture of the Elixir tests (nif/ex_burn/test/fixtures/burn_mlp.mpk): the digits `Mlp`
/// with [`formula`] values, written by Burn's recorder. `EX_BURN_WRITE_FIXTURES=1` writes it
/// again; every run checks that Burn loads it back with those values and prints the sums
/// that the Elixir test checks too.
#[test]
fn elixir_fixture_is_burns_mlp() {
    let device = Default::default();
    let expected = params(&Mlp::<B>::init(&device).map(&mut Formula::default()));
    if std::env::var_os("EX_BURN_WRITE_FIXTURES").is_some() {
        let model = Mlp::<B>::init(&device).map(&mut Formula::default());
        save(model, &fixture()).expect("writing the fixture");
    }
    let loaded = load(Mlp::<B>::init(&device), &fixture(), &device).expect("Burn loads the fixture");
    assert_same(&params(&loaded), &expected);
    assert!(std::fs::metadata(fixture()).unwrap().len() < 100_000, "the fixture stays small");
    for (name, data) in &expected {
        let sum: f64 = data.to_vec::<f32>().unwrap().iter().map(|&x| x as f64).sum();
        println!("fixture {name}: shape {:?}, sum {sum}", data.shape.as_slice());
    }
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../nif/ex_burn/test/fixtures/burn_mlp.mpk")
}

/// `--export-data`: the file holds the split `Split::new` gives for the seed, as the job
/// trains on it, with the statistics it standardised with; the command line writes the same.
#[test]
fn exported_data_matches_the_split() {
    let device = Default::default();
    let split = Split::new(&Digits::load(), 0.25, 5);
    let path = export_data::<B>(&split, &temp("export"), &device).expect("export");
    let record = record::read_file(&path).expect("the NIF reads the export");
    let _ = std::fs::remove_file(&path);
    let get =
        |name: &str| record.params.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name}")).1.clone();
    let floats = |name: &str, values: &[f32], shape: Vec<usize>| {
        let data = get(name);
        assert_eq!((data.dtype, data.shape.as_slice().to_vec()), (DType::F32, shape), "{name}");
        assert_eq!(data.to_vec::<f32>().unwrap(), values, "{name}");
    };
    let ints = |name: &str, values: &[i64]| {
        let data = get(name);
        assert_eq!((data.dtype, data.shape.as_slice().to_vec()), (DType::I32, vec![values.len()]), "{name}");
        assert_eq!(data.to_vec::<i32>().unwrap().iter().map(|&l| l as i64).collect::<Vec<_>>(), values, "{name}");
    };
    assert_eq!(record.params.len(), 6);
    floats("train.images", &split.train.images, vec![split.train.len(), PIXELS]);
    floats("test.images", &split.test.images, vec![split.test.len(), PIXELS]);
    ints("train.labels", &split.train.labels);
    ints("test.labels", &split.test.labels);
    floats("mean", &split.mean, vec![PIXELS]);
    floats("std", &split.std, vec![PIXELS]);
    // Standardised with the training statistics: pixel 20 of the first test image, by hand.
    let raw = Digits::load();
    let first = raw.images.chunks(PIXELS).position(|img| {
        img.iter()
            .zip(&split.mean)
            .zip(&split.std)
            .map(|((x, m), s)| (x - m) / s)
            .eq(split.test.images[..PIXELS].iter().copied())
    });
    assert!(first.is_some(), "the first test image is a standardised image of the data set");

    let cli = temp("export_cli");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_digits"))
        .args(["--export-data", cli.to_str().unwrap(), "--seed", "5", "--test-fraction", "0.25"])
        .status()
        .expect("running digits");
    assert!(status.success());
    let from_cli = record::read_file(&cli).expect("the command's export reads");
    let _ = std::fs::remove_file(&cli);
    assert_same(&from_cli.params, &record.params);
}
