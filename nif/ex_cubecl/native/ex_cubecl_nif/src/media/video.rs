//! Video files through FFmpeg's libraries (feature `video`): frames decoded and converted to
//! RGB24 by libswscale, uploaded as `[height, width, 3]` `u8` device tensors one at a time
//! (`ExCubecl.Video`); frames encoded back to a file (`ExCubecl.Transcode`). Without the
//! feature every NIF here answers an error that says how to build with it.
//!
//! NIFs (dirty IO schedulers: they read and write files and decode):
//! - `video_open(path)`: `{reader, width, height, fps, frames, duration, codec}` (`frames` the
//!   container's count, 0 where it gives none; `duration` in seconds, 0.0 where unknown).
//! - `video_next(reader, device)`: `{ref, [h, w, 3], seconds}` of the next frame, or `nil`
//!   at the end.
//! - `video_seek(reader, seconds)`: the next frame is the first at or after `seconds`.
//! - `video_writer_open(path, width, height, fps, codec, bit_rate)`: a writer (`codec` an
//!   FFmpeg encoder name such as `"mpeg4"`, `"libx264"` or `"ffv1"`; frames stored as YUV
//!   4:2:0, or 4:4:4 for ffv1; `bit_rate` in bits per second, for the lossy codecs).
//! - `video_writer_write(writer, tensor)`: appends a `[h, w, 3]` `u8` frame.
//! - `video_writer_close(writer)`: flushes the encoder and writes the trailer.
use std::sync::Mutex;

use rustler::{Resource, ResourceArc};

use crate::error::{NifError, NifResult, guard};
use crate::tensor::TensorRef;

/// Holds FFmpeg's state of one open file.
///
/// SAFETY: FFmpeg's contexts are plain heap objects with no tie to the thread that made them;
/// the resource's mutex lets one thread at a time touch them.
struct Unshared<T>(T);
unsafe impl<T> Send for Unshared<T> {}

/// An open video file being read.
pub struct ReaderRes(Mutex<Option<Unshared<imp::Reader>>>);
#[rustler::resource_impl]
impl Resource for ReaderRes {}

/// A video file being written.
pub struct WriterRes(Mutex<Option<Unshared<imp::Writer>>>);
#[rustler::resource_impl]
impl Resource for WriterRes {}

fn with<T, R>(op: &str, m: &Mutex<Option<Unshared<T>>>, f: impl FnOnce(&mut T) -> NifResult<R>) -> NifResult<R> {
    let mut guard = m.lock().unwrap_or_else(|e| e.into_inner());
    match guard.as_mut() {
        Some(Unshared(state)) => f(state),
        None => Err(NifError::new(op, "the video was closed", "close/1 was called on it before")),
    }
}

type Info = (ResourceArc<ReaderRes>, u32, u32, f64, u64, f64, String);

#[rustler::nif(schedule = "DirtyIo")]
fn video_open(path: String) -> NifResult<Info> {
    let op = "video_open";
    guard(op, || {
        let (reader, w, h, fps, frames, duration, codec) = imp::open(op, &path)?;
        Ok((ResourceArc::new(ReaderRes(Mutex::new(Some(Unshared(reader))))), w, h, fps, frames, duration, codec))
    })
}

#[rustler::nif(schedule = "DirtyIo")]
fn video_next(reader: ResourceArc<ReaderRes>, device: String) -> NifResult<Option<(TensorRef, Vec<usize>, f64)>> {
    let op = "video_next";
    guard(op, || {
        let device = crate::device::Dev::parse(op, &device)?;
        with(op, &reader.0, |r| imp::next(op, r, &device))
    })
}

#[rustler::nif(schedule = "DirtyIo")]
fn video_seek(reader: ResourceArc<ReaderRes>, seconds: f64) -> NifResult<bool> {
    let op = "video_seek";
    guard(op, || with(op, &reader.0, |r| imp::seek(op, r, seconds)).map(|()| true))
}

#[rustler::nif(schedule = "DirtyIo")]
fn video_close(reader: ResourceArc<ReaderRes>) -> bool {
    reader.0.lock().unwrap_or_else(|e| e.into_inner()).take().is_some()
}

#[rustler::nif(schedule = "DirtyIo")]
fn video_writer_open(path: String, width: u32, height: u32, fps: u32, codec: String, bit_rate: u64) -> NifResult<ResourceArc<WriterRes>> {
    let op = "video_writer_open";
    guard(op, || {
        let writer = imp::create(op, &path, width, height, fps, &codec, bit_rate)?;
        Ok(ResourceArc::new(WriterRes(Mutex::new(Some(Unshared(writer))))))
    })
}

#[rustler::nif(schedule = "DirtyIo")]
fn video_writer_write(writer: ResourceArc<WriterRes>, frame: TensorRef) -> NifResult<bool> {
    let op = "video_writer_write";
    guard(op, || {
        let prim = frame.get(op)?;
        with(op, &writer.0, |w| imp::write(op, w, prim)).map(|()| true)
    })
}

#[rustler::nif(schedule = "DirtyIo")]
fn video_writer_close(writer: ResourceArc<WriterRes>) -> NifResult<bool> {
    let op = "video_writer_close";
    guard(op, || {
        let state = writer.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        match state {
            Some(Unshared(w)) => imp::finish(op, w).map(|()| true),
            None => Ok(false),
        }
    })
}

/// The NIF's runtimes say whether this build reads video.
#[rustler::nif]
fn video_available() -> bool {
    cfg!(feature = "video")
}

#[cfg(not(feature = "video"))]
mod imp {
    //! A build without the `video` feature: every call is this error.
    use crate::device::Dev;
    use crate::error::{NifError, NifResult};
    use crate::tensor::{AnyPrim, TensorRef};

    pub enum Reader {}
    pub enum Writer {}

    fn missing<T>(op: &str) -> NifResult<T> {
        Err(NifError::new(
            op,
            "this NIF was built without the `video` feature",
            "install FFmpeg's libraries (scripts/setup_video.sh: Debian's libavcodec-dev, libavformat-dev, libswscale-dev, libclang-dev) and build with EX_CUBECL_FEATURES=wgpu,video",
        ))
    }

    pub fn open(op: &str, _path: &str) -> NifResult<(Reader, u32, u32, f64, u64, f64, String)> {
        missing(op)
    }
    pub fn next(_op: &str, r: &mut Reader, _device: &Dev) -> NifResult<Option<(TensorRef, Vec<usize>, f64)>> {
        match *r {}
    }
    pub fn seek(_op: &str, r: &mut Reader, _seconds: f64) -> NifResult<()> {
        match *r {}
    }
    pub fn create(op: &str, _path: &str, _w: u32, _h: u32, _fps: u32, _codec: &str, _bit_rate: u64) -> NifResult<Writer> {
        missing(op)
    }
    pub fn write(_op: &str, w: &mut Writer, _frame: AnyPrim) -> NifResult<()> {
        match *w {}
    }
    pub fn finish(_op: &str, w: Writer) -> NifResult<()> {
        match w {}
    }
}

#[cfg(feature = "video")]
mod imp {
    //! FFmpeg through `ffmpeg-next`.
    use ffmpeg_next as ff;
    use ff::format::Pixel;
    use ff::software::scaling;

    use burn_backend::DType;

    use crate::buffer;
    use crate::device::Dev;
    use crate::error::{NifError, NifResult};
    use crate::tensor::{AnyPrim, TensorRef, wrap};

    pub struct Reader {
        input: ff::format::context::Input,
        decoder: ff::decoder::Video,
        scaler: Option<scaling::Context>,
        stream: usize,
        time_base: ff::Rational,
        /// Frames before this time (in the stream's time base) are skipped (after a seek).
        skip_before: Option<i64>,
        draining: bool,
        done: bool,
    }

    pub struct Writer {
        output: ff::format::context::Output,
        encoder: ff::codec::encoder::video::Encoder,
        scaler: scaling::Context,
        time_base: ff::Rational,
        stream_time_base: ff::Rational,
        width: u32,
        height: u32,
        index: i64,
        path: String,
    }

    fn init(op: &str) -> NifResult<()> {
        static INIT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
        INIT.get_or_init(|| {
            // Failures reach the caller as errors; FFmpeg's own log would only repeat them on stderr.
            ff::log::set_level(ff::log::Level::Quiet);
            ff::init().map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| NifError::new(op, format!("FFmpeg did not start: {e}"), ""))
    }

    fn fail(op: &str, what: &str, path: &str) -> impl Fn(ff::Error) -> NifError {
        let (op, what, path) = (op.to_string(), what.to_string(), path.to_string());
        move |e| NifError::new(&op, format!("{what}: {e}"), path.clone())
    }

    pub fn open(op: &str, path: &str) -> NifResult<(Reader, u32, u32, f64, u64, f64, String)> {
        init(op)?;
        let input = ff::format::input(&path).map_err(fail(op, "cannot open the video", path))?;
        let stream = input
            .streams()
            .best(ff::media::Type::Video)
            .ok_or_else(|| NifError::new(op, "the file has no video stream", path))?;
        let (index, time_base, rate, frames) = (stream.index(), stream.time_base(), stream.avg_frame_rate(), stream.frames());
        let context = ff::codec::context::Context::from_parameters(stream.parameters()).map_err(fail(op, "cannot read the stream's parameters", path))?;
        let decoder = context.decoder().video().map_err(fail(op, "no decoder for the video stream", path))?;
        let (w, h) = (decoder.width(), decoder.height());
        let codec = decoder.codec().map(|c| c.name().to_string()).unwrap_or_default();
        let fps = if rate.denominator() != 0 { f64::from(rate) } else { 0.0 };
        let duration = if input.duration() > 0 { input.duration() as f64 / f64::from(ff::ffi::AV_TIME_BASE) } else { 0.0 };
        let reader = Reader { input, decoder, scaler: None, stream: index, time_base, skip_before: None, draining: false, done: false };
        Ok((reader, w, h, fps, frames.max(0) as u64, duration, codec))
    }

    /// The next decoded frame, or `None` at the end.
    fn decode_next(op: &str, r: &mut Reader) -> NifResult<Option<ff::frame::Video>> {
        loop {
            let mut frame = ff::frame::Video::empty();
            if r.decoder.receive_frame(&mut frame).is_ok() {
                let ts = frame.timestamp().or(frame.pts());
                if let (Some(skip), Some(ts)) = (r.skip_before, ts)
                    && ts < skip
                {
                    continue;
                }
                r.skip_before = None;
                return Ok(Some(frame));
            }
            if r.done || r.draining {
                r.done = true;
                return Ok(None);
            }
            let mut packet = ff::Packet::empty();
            match packet.read(&mut r.input) {
                Ok(()) if packet.stream() == r.stream => {
                    // A damaged packet is skipped, as players do.
                    let _ = r.decoder.send_packet(&packet);
                }
                Ok(()) => {}
                Err(ff::Error::Eof) => {
                    r.decoder.send_eof().map_err(|e| NifError::new(op, format!("cannot flush the decoder: {e}"), ""))?;
                    r.draining = true;
                }
                Err(e) => return Err(NifError::new(op, format!("cannot read the video: {e}"), "")),
            }
        }
    }

    pub fn next(op: &str, r: &mut Reader, device: &Dev) -> NifResult<Option<(TensorRef, Vec<usize>, f64)>> {
        let Some(frame) = decode_next(op, r)? else { return Ok(None) };
        let (w, h) = (frame.width(), frame.height());
        let rebuild = r.scaler.as_ref().is_none_or(|s| s.input().width != w || s.input().height != h || s.input().format != frame.format());
        if rebuild {
            r.scaler = Some(
                scaling::Context::get(frame.format(), w, h, Pixel::RGB24, w, h, scaling::Flags::BILINEAR)
                    .map_err(|e| NifError::new(op, format!("cannot convert the frames to RGB: {e}"), format!("{:?} {w}x{h}", frame.format())))?,
            );
        }
        let mut rgb = ff::frame::Video::empty();
        r.scaler
            .as_mut()
            .expect("made above")
            .run(&frame, &mut rgb)
            .map_err(|e| NifError::new(op, format!("cannot convert the frame to RGB: {e}"), ""))?;
        let (stride, row) = (rgb.stride(0), w as usize * 3);
        let data = rgb.data(0);
        let mut pixels = Vec::with_capacity(row * h as usize);
        for y in 0..h as usize {
            pixels.extend_from_slice(&data[y * stride..y * stride + row]);
        }
        let shape = vec![h as usize, w as usize, 3];
        let seconds = frame.timestamp().or(frame.pts()).map_or(0.0, |ts| ts as f64 * f64::from(r.time_base));
        let tensor = wrap(buffer::upload(op, pixels, shape.clone(), DType::U8, device)?);
        Ok(Some((tensor, shape, seconds)))
    }

    pub fn seek(op: &str, r: &mut Reader, seconds: f64) -> NifResult<()> {
        if !(seconds >= 0.0 && seconds.is_finite()) {
            return Err(NifError::new(op, "a time is a number of seconds, 0 or more", format!("{seconds}")));
        }
        let target = (seconds * f64::from(ff::ffi::AV_TIME_BASE)) as i64;
        // The key frame at or before the target, then decode up to it.
        r.input.seek(target, ..target).map_err(|e| NifError::new(op, format!("cannot seek: {e}"), format!("{seconds} s")))?;
        r.decoder.flush();
        let tb = r.time_base;
        r.skip_before = Some(if tb.numerator() > 0 { (seconds * f64::from(tb.denominator()) / f64::from(tb.numerator())).floor() as i64 } else { 0 });
        r.draining = false;
        r.done = false;
        Ok(())
    }

    pub fn create(op: &str, path: &str, width: u32, height: u32, fps: u32, codec: &str, bit_rate: u64) -> NifResult<Writer> {
        init(op)?;
        if width == 0 || height == 0 || fps == 0 || width % 2 == 1 || height % 2 == 1 {
            return Err(NifError::new(op, "frames need an even width and height and a positive rate", format!("{width}x{height} at {fps} fps")));
        }
        let mut output = ff::format::output(&path).map_err(fail(op, "cannot create the video (its extension names the container)", path))?;
        let found = ff::encoder::find_by_name(codec).ok_or_else(|| NifError::new(op, format!("FFmpeg has no encoder {codec:?}"), path))?;
        let global_header = output.format().flags().contains(ff::format::Flags::GLOBAL_HEADER);
        let mut stream = output.add_stream(found).map_err(fail(op, "cannot add a video stream", path))?;
        let mut encoder = ff::codec::context::Context::new_with_codec(found)
            .encoder()
            .video()
            .map_err(fail(op, "not a video encoder", path))?;
        let format = if codec == "ffv1" { Pixel::YUV444P } else { Pixel::YUV420P };
        let time_base = ff::Rational::new(1, fps as i32);
        encoder.set_width(width);
        encoder.set_height(height);
        encoder.set_format(format);
        encoder.set_bit_rate(bit_rate as usize);
        encoder.set_time_base(time_base);
        encoder.set_frame_rate(Some(ff::Rational::new(fps as i32, 1)));
        if global_header {
            encoder.set_flags(ff::codec::Flags::GLOBAL_HEADER);
        }
        let encoder = encoder.open_as(found).map_err(fail(op, &format!("cannot open the encoder {codec}"), path))?;
        stream.set_parameters(&encoder);
        stream.set_time_base(time_base);
        output.write_header().map_err(fail(op, "cannot write the header", path))?;
        let stream_time_base = output.stream(0).map_or(time_base, |s| s.time_base());
        let scaler = scaling::Context::get(Pixel::RGB24, width, height, format, width, height, scaling::Flags::BILINEAR)
            .map_err(fail(op, "cannot convert RGB frames", path))?;
        Ok(Writer { output, encoder, scaler, time_base, stream_time_base, width, height, index: 0, path: path.to_string() })
    }

    fn drain(op: &str, w: &mut Writer) -> NifResult<()> {
        let mut packet = ff::Packet::empty();
        while w.encoder.receive_packet(&mut packet).is_ok() {
            packet.set_stream(0);
            packet.rescale_ts(w.time_base, w.stream_time_base);
            packet.write_interleaved(&mut w.output).map_err(fail(op, "cannot write a packet", &w.path))?;
        }
        Ok(())
    }

    pub fn write(op: &str, w: &mut Writer, prim: AnyPrim) -> NifResult<()> {
        let shape = prim.shape();
        if shape.as_slice() != [w.height as usize, w.width as usize, 3] || prim.dtype() != DType::U8 {
            return Err(NifError::new(
                op,
                format!("frames of this video are [{}, {}, 3] u8", w.height, w.width),
                format!("{}: {}", w.path, prim.describe()),
            ));
        }
        let pixels = buffer::read(op, prim)?;
        let mut rgb = ff::frame::Video::new(Pixel::RGB24, w.width, w.height);
        let (stride, row) = (rgb.stride(0), w.width as usize * 3);
        let data = rgb.data_mut(0);
        for y in 0..w.height as usize {
            data[y * stride..y * stride + row].copy_from_slice(&pixels[y * row..(y + 1) * row]);
        }
        let mut yuv = ff::frame::Video::empty();
        w.scaler.run(&rgb, &mut yuv).map_err(fail(op, "cannot convert the frame", &w.path))?;
        yuv.set_pts(Some(w.index));
        w.index += 1;
        w.encoder.send_frame(&yuv).map_err(fail(op, "cannot encode the frame", &w.path))?;
        drain(op, w)
    }

    pub fn finish(op: &str, mut w: Writer) -> NifResult<()> {
        w.encoder.send_eof().map_err(fail(op, "cannot flush the encoder", &w.path))?;
        drain(op, &mut w)?;
        w.output.write_trailer().map_err(fail(op, "cannot write the trailer", &w.path))
    }
}
