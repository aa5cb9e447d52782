//! Group colours: a fixed qualitative palette (light enough for black text), then evenly spread
//! hues for K beyond it; or, with the colour-blind option, the Okabe-Ito palette (distinguishable
//! with the common colour-vision deficiencies) for the first 8 groups. The same colours go to the
//! screen and to SVG exports. The option belongs to the UI thread (`set_colour_blind`, set by
//! the app from its settings each frame), as every view and export asks this module for colours
//! there; thread-local, so that two apps in one process (the GUI tests) never see each other's.

use egui::Color32;
use std::cell::Cell;

thread_local! {
    static COLOUR_BLIND: Cell<bool> = const { Cell::new(false) };
}

pub fn set_colour_blind(on: bool) {
    COLOUR_BLIND.with(|c| c.set(on));
}

pub fn colour_blind() -> bool {
    COLOUR_BLIND.with(|c| c.get())
}

/// Okabe & Ito's palette (black replaced by a light grey, blue lightened for black text).
pub const OKABE_ITO: [[u8; 3]; 8] = [
    [230, 159, 0],
    [86, 180, 233],
    [0, 158, 115],
    [240, 228, 66],
    [93, 165, 218],
    [213, 94, 0],
    [204, 121, 167],
    [187, 187, 187],
];

const BASE: [[u8; 3]; 12] = [
    [141, 211, 199],
    [255, 237, 111],
    [190, 186, 218],
    [251, 128, 114],
    [128, 177, 211],
    [253, 180, 98],
    [179, 222, 105],
    [252, 205, 229],
    [204, 235, 197],
    [188, 128, 189],
    [217, 217, 217],
    [255, 255, 179],
];

pub fn group(g: usize) -> Color32 {
    if colour_blind() {
        if let Some(c) = OKABE_ITO.get(g) {
            return Color32::from_rgb(c[0], c[1], c[2]);
        }
    }
    if let Some(c) = BASE.get(g) {
        return Color32::from_rgb(c[0], c[1], c[2]);
    }
    // Golden-angle hues, pastel.
    let h = (g as f32 * 0.618_034).fract();
    let c: egui::ecolor::Hsva = egui::ecolor::Hsva::new(h, 0.45, 0.95, 1.0);
    c.into()
}

/// The same colour as `#rrggbb` for SVG.
pub fn hex(c: Color32) -> String {
    format!("#{:02x}{:02x}{:02x}", c.r(), c.g(), c.b())
}

/// Mask heatmap classes.
pub const LOCAL: Color32 = Color32::from_rgb(66, 133, 244);
pub const SAME_GROUP: Color32 = Color32::from_rgb(244, 160, 0);
pub const PRUNED: Color32 = Color32::from_rgb(60, 60, 60);
/// Pairs that are not causal, or cross a segment boundary (never computed).
pub const NONE: Color32 = Color32::from_rgb(245, 245, 245);

/// Mixes colours by weight (weights need not sum to 1).
pub fn mix(parts: &[(Color32, f32)]) -> Color32 {
    let total: f32 = parts.iter().map(|p| p.1).sum();
    if total <= 0.0 {
        return NONE;
    }
    let ch = |f: fn(&Color32) -> u8| (parts.iter().map(|(c, w)| f(c) as f32 * w).sum::<f32>() / total).round() as u8;
    Color32::from_rgb(ch(|c| c.r()), ch(|c| c.g()), ch(|c| c.b()))
}
