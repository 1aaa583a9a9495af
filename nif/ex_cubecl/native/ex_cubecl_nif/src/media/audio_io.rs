//! Audio files to samples and back, on the host: WAV, FLAC, MP3 and OGG/Vorbis decoded by
//! symphonia to interleaved `f32` (`[frames, channels]`, -1.0..1.0); WAV written here (16-bit
//! PCM or 32-bit float).
use std::io::Cursor;

use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{CODEC_TYPE_NULL, DecoderOptions};
use symphonia::core::errors::Error;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

/// Decoded audio: interleaved samples, channels and rate.
pub struct Samples {
    pub data: Vec<f32>,
    pub channels: usize,
    pub rate: u32,
}

/// The first audio track of `bytes`; `extension` (wav, flac, mp3, ogg) helps the probe.
pub fn decode(bytes: Vec<u8>, extension: Option<&str>) -> Result<Samples, String> {
    let stream = MediaSourceStream::new(Box::new(Cursor::new(bytes)), Default::default());
    let mut hint = Hint::new();
    if let Some(ext) = extension {
        hint.with_extension(ext);
    }
    let probed = symphonia::default::get_probe()
        .format(&hint, stream, &FormatOptions::default(), &MetadataOptions::default())
        .map_err(|e| format!("not audio in a known format (WAV, FLAC, MP3, OGG/Vorbis): {e}"))?;
    let mut format = probed.format;
    let track = format
        .tracks()
        .iter()
        .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
        .ok_or("the file has no audio track")?;
    let track_id = track.id;
    let mut channels = track.codec_params.channels.map_or(0, |c| c.count());
    let mut rate = track.codec_params.sample_rate.unwrap_or(0);
    let mut decoder = symphonia::default::get_codecs()
        .make(&track.codec_params, &DecoderOptions::default())
        .map_err(|e| format!("unsupported codec: {e}"))?;
    let mut data = Vec::new();
    let mut bad_packets = 0usize;
    loop {
        let packet = match format.next_packet() {
            Ok(p) => p,
            Err(Error::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(Error::ResetRequired) => break,
            Err(e) => return Err(format!("cannot read the audio: {e}")),
        };
        if packet.track_id() != track_id {
            continue;
        }
        match decoder.decode(&packet) {
            Ok(buf) => {
                let spec = *buf.spec();
                let mut samples = SampleBuffer::<f32>::new(buf.capacity() as u64, spec);
                samples.copy_interleaved_ref(buf);
                data.extend_from_slice(samples.samples());
                channels = spec.channels.count();
                rate = spec.rate;
            }
            // A damaged packet is skipped, as players do; a file of nothing else is an error.
            Err(Error::DecodeError(_)) => bad_packets += 1,
            Err(e) => return Err(format!("cannot decode the audio: {e}")),
        }
    }
    if data.is_empty() {
        return Err(if bad_packets > 0 {
            format!("no packet of the audio decoded ({bad_packets} damaged)")
        } else {
            "the file holds no samples".into()
        });
    }
    if channels == 0 || rate == 0 {
        return Err("the file gives no channel count or sample rate".into());
    }
    Ok(Samples { data, channels, rate })
}

/// A WAV file of interleaved `samples` (`channels` of them per frame) at `rate`: 16-bit PCM
/// (samples clamped to -1.0..1.0) or, with `float`, 32-bit IEEE float.
pub fn encode_wav(samples: &[f32], channels: usize, rate: u32, float: bool) -> Result<Vec<u8>, String> {
    if channels == 0 || channels > u16::MAX as usize || rate == 0 {
        return Err(format!("a WAV file needs 1 to 65535 channels and a positive rate, got {channels} channels at {rate} Hz"));
    }
    let bytes_per_sample: usize = if float { 4 } else { 2 };
    let data_len = samples.len() * bytes_per_sample;
    let data_len32 = u32::try_from(data_len).ok().filter(|n| *n <= u32::MAX - 36).ok_or("too long for a WAV file (4 GiB)")?;
    let block = (channels * bytes_per_sample) as u16;
    let mut out = Vec::with_capacity(44 + data_len);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len32).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&(if float { 3u16 } else { 1u16 }).to_le_bytes());
    out.extend_from_slice(&(channels as u16).to_le_bytes());
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&rate.saturating_mul(u32::from(block)).to_le_bytes());
    out.extend_from_slice(&block.to_le_bytes());
    out.extend_from_slice(&((bytes_per_sample * 8) as u16).to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len32.to_le_bytes());
    for &s in samples {
        if float {
            out.extend_from_slice(&s.to_le_bytes());
        } else {
            let v = (s.clamp(-1.0, 1.0) * 32767.0).round() as i16;
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    Ok(out)
}
