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
        let t = ui.input(|i| i.time);
        let start = (t * 5.0) % std::f64::consts::TAU;
        let r = rect.height() * 0.5 - 2.0;
        let points: Vec<egui::Pos2> = (0..=16)
            .map(|n| {
                let a = start + n as f64 / 16.0 * 4.0;
                rect.center() + r * egui::vec2(a.cos() as f32, a.sin() as f32)
            })
            .collect();
        ui.painter().add(egui::Shape::line(points, egui::Stroke::new(2.0, ui.visuals().strong_text_color())));
    }
    response
}
