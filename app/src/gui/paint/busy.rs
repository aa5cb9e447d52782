//! A busy indicator that does not keep the window repainting. egui's `Spinner` asks for a new
//! frame every frame, so while it shows, the window renders as fast as it can: under software
//! OpenGL (Mesa llvmpipe, e.g. Xvfb or a VM) that takes a core away from the analysis it is
//! waiting for. This one is drawn from the clock and moves at the pace the app repaints while
//! busy (`app::BUSY_REPAINT`).

/// A small rotating arc, sized like a line of text.
pub fn busy(ui: &mut egui::Ui) -> egui::Response {
    let size = ui.text_style_height(&egui::TextStyle::Body);
    let (rect, response) = ui.allocate_exact_size(egui::vec2(size, size), egui::Sense::hover());
    if ui.is_rect_visible(rect) {
        // A faint ring with a quarter arc that advances with the clock: at a few frames per
        // second a long arc would read as a letter "C".
        let t = ui.input(|i| i.time);
        let start = (t * 5.0) % std::f64::consts::TAU;
        let r = rect.height() * 0.5 - 2.0;
        let color = ui.visuals().strong_text_color();
        ui.painter().circle_stroke(rect.center(), r, egui::Stroke::new(2.0, color.gamma_multiply(0.2)));
        let points: Vec<egui::Pos2> = (0..=8)
            .map(|n| {
                let a = start + n as f64 / 8.0 * 1.6;
                rect.center() + r * egui::vec2(a.cos() as f32, a.sin() as f32)
            })
            .collect();
        ui.painter().add(egui::Shape::line(points, egui::Stroke::new(2.0, color)));
    }
    response
}
