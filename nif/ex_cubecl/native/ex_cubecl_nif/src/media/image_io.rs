//! Image files to pixels and back, on the host, through the `image` crate: PNG, JPEG, WebP,
//! BMP and GIF. Pixels are HWC `u8` (`[height, width, channels]`, rows top to bottom);
//! 16-bit and float images are converted to 8 bits.
use std::io::Cursor;

use image::codecs::gif::GifDecoder;
use image::{AnimationDecoder, DynamicImage, ExtendedColorType, ImageFormat, ImageReader};

/// Decoded pixels: `[height, width, channels]` and the bytes.
pub struct Pixels {
    pub shape: [usize; 3],
    pub data: Vec<u8>,
}

/// The image in `bytes` (its format guessed from its first bytes), with `channels` (1 gray,
/// 2 gray + alpha, 3 RGB, 4 RGBA; `None`: the file's own, 8 bits).
pub fn decode(bytes: &[u8], channels: Option<usize>) -> Result<Pixels, String> {
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| format!("cannot read the image: {e}"))?;
    if reader.format().is_none() {
        return Err("not an image in a known format (PNG, JPEG, WebP, BMP, GIF)".into());
    }
    let img = reader.decode().map_err(|e| format!("cannot decode the image: {e}"))?;
    Ok(pixels(img, channels))
}

/// Every frame of an animated GIF (a still image in another format: its one frame), each
/// composed on the full canvas: `[frames, height, width, channels]` (`None`: RGBA).
pub fn decode_frames(bytes: &[u8], channels: Option<usize>) -> Result<(usize, Pixels), String> {
    let format = image::guess_format(bytes).map_err(|e| format!("not an image in a known format: {e}"))?;
    if format != ImageFormat::Gif {
        return decode(bytes, channels).map(|p| (1, p));
    }
    let decoder = GifDecoder::new(Cursor::new(bytes)).map_err(|e| format!("cannot decode the GIF: {e}"))?;
    let frames = decoder.into_frames().collect_frames().map_err(|e| format!("cannot decode the GIF's frames: {e}"))?;
    let mut shape = [0, 0, 0];
    let mut data = Vec::new();
    for frame in &frames {
        let p = pixels(DynamicImage::ImageRgba8(frame.buffer().clone()), Some(channels.unwrap_or(4)));
        shape = p.shape;
        data.extend_from_slice(&p.data);
    }
    if frames.is_empty() {
        return Err("the GIF has no frames".into());
    }
    Ok((frames.len(), Pixels { shape, data }))
}

fn pixels(img: DynamicImage, channels: Option<usize>) -> Pixels {
    let channels = channels.unwrap_or_else(|| usize::from(img.color().channel_count()));
    let (w, h) = (img.width() as usize, img.height() as usize);
    let data = match channels {
        1 => img.into_luma8().into_raw(),
        2 => img.into_luma_alpha8().into_raw(),
        3 => img.into_rgb8().into_raw(),
        _ => img.into_rgba8().into_raw(),
    };
    Pixels { shape: [h, w, channels], data }
}

/// A file format by name (png, jpeg or jpg, webp, bmp, gif) or by a path's extension.
pub fn format(name: &str) -> Result<ImageFormat, String> {
    let ext = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
    match ext.as_str() {
        "png" => Ok(ImageFormat::Png),
        "jpeg" | "jpg" => Ok(ImageFormat::Jpeg),
        "webp" => Ok(ImageFormat::WebP),
        "bmp" => Ok(ImageFormat::Bmp),
        "gif" => Ok(ImageFormat::Gif),
        _ => Err(format!("unknown image format {name:?} (png, jpeg, webp, bmp, gif)")),
    }
}

/// `data` (`[height, width, channels]` `u8`) as a file of `format`; `quality` (1..100) for
/// JPEG. JPEG takes 1 or 3 channels, WebP (lossless) 3 or 4, BMP 1, 3 or 4, GIF 3 or 4, PNG
/// 1 to 4.
pub fn encode(data: &[u8], shape: [usize; 3], format: ImageFormat, quality: u8) -> Result<Vec<u8>, String> {
    let [h, w, c] = shape;
    let color = match c {
        1 => ExtendedColorType::L8,
        2 => ExtendedColorType::La8,
        3 => ExtendedColorType::Rgb8,
        4 => ExtendedColorType::Rgba8,
        _ => return Err(format!("an image has 1 to 4 channels, got {c}")),
    };
    let allowed: &[usize] = match format {
        ImageFormat::Jpeg => &[1, 3],
        ImageFormat::WebP | ImageFormat::Gif => &[3, 4],
        ImageFormat::Bmp => &[1, 3, 4],
        _ => &[1, 2, 3, 4],
    };
    if !allowed.contains(&c) {
        return Err(format!("{format:?} takes {allowed:?} channels, got {c}"));
    }
    let (w32, h32) = (u32::try_from(w).map_err(|_| "too wide")?, u32::try_from(h).map_err(|_| "too tall")?);
    if w32 == 0 || h32 == 0 {
        return Err(format!("an empty image ({h}x{w}) has no file"));
    }
    let mut out = Vec::new();
    let result = match format {
        ImageFormat::Jpeg => image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality.clamp(1, 100))
            .encode(data, w32, h32, color),
        ImageFormat::Gif => {
            let rgba = match c {
                3 => DynamicImage::ImageRgb8(image::RgbImage::from_raw(w32, h32, data.to_vec()).ok_or("size mismatch")?).into_rgba8(),
                _ => image::RgbaImage::from_raw(w32, h32, data.to_vec()).ok_or("size mismatch")?,
            };
            let mut encoder = image::codecs::gif::GifEncoder::new(&mut out);
            encoder.encode_frame(image::Frame::new(rgba))
        }
        _ => {
            let mut cursor = Cursor::new(&mut out);
            image::write_buffer_with_format(&mut cursor, data, w32, h32, color, format)
        }
    };
    result.map_err(|e| format!("cannot encode {format:?}: {e}"))?;
    Ok(out)
}
