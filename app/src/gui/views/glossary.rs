//! The glossary (Help → Glossary): what the app's words mean, in a window of its own.

use super::view::{Command, View, ViewCtx};

pub const ENTRIES: &[(&str, &str)] = &[
    ("group (centroid)", "Each Focus layer has K learned centroids. A token's routing vector (h W_g, d_g = 16 numbers) is scored against each centroid; Sinkhorn turns the scores into memberships. A token's group in the views is its largest membership."),
    ("top-k groups", "The k groups with the largest memberships. In hard top-k mode two distant tokens attend to each other only when their top-k groups share at least one group."),
    ("window w", "Pairs at most w tokens apart always attend (local pairs), whatever their groups."),
    ("pairs retained", "The share of causal pairs (j <= i, within a segment) that the top-k mask keeps: local pairs plus distant pairs that share a group. 100% is dense attention. With 2k > K every two tokens share a group, so top-k is dense."),
    ("pruned", "A distant pair whose top-k groups are disjoint: top-k attention gives it weight 0."),
    ("dominance", "The share of tokens in the largest group of a layer. 1/K is perfect balance; the shipped adapters aim at <= 1.3/K."),
    ("confidence", "A token's largest membership (1/K: undecided, 1: certain); the views show the layer mean."),
    ("membership entropy", "The entropy of a token's memberships in nats; ln K is uniform."),
    ("Sinkhorn (causal / whole-sequence)", "Balances the memberships so that groups have equal mass. Whole-sequence Sinkhorn (the paper's) balances over all tokens, so a token's groups depend on later tokens; causal Sinkhorn balances over each token's prefix only."),
    ("preview (provisional)", "A text longer than 512 tokens is first analysed up to token 512. With whole-sequence Sinkhorn that routing is balanced over 512 tokens, not all of them, so its groups can change when the full analysis arrives."),
    ("matched group numbers", "Centroid numbers are arbitrary per layer and per adapter. The views number and colour each layer's groups by the previous layer's group they share most tokens with (Hungarian matching on co-membership counts), so one colour means the same tokens throughout; 'raw group indices' shows the centroids' own numbers."),
    ("purity, base rate, lift", "Purity: the share of a group's tokens in its most common linguistic category. Base rate: that category's share of all analysed tokens. Lift = purity / base rate: 1 means the group holds the category no more often than the text does."),
    ("long-range partners", "For a clicked token: the tokens beyond the window that share one of its top-k groups, with the exact attention weight the selected head gives each."),
    ("delta loss (compare)", "Next-token loss (negative log-likelihood, nats) of run A minus run B at each position: > 0 where A predicts the next token worse."),
    ("attention mass pruned (compare)", "For a top-k run: the weight that dense softmax attention (the same layer's queries and keys) would give to the pairs the top-k mask drops: in the selected layer and head, that layer's mean over heads, or the mean over layers and heads."),
    ("delta loss per layer (compare)", "Loss is the whole model's, so a layer has none: the per-layer curve is the mean delta loss of the tokens whose top-k groups change in that layer, and of those whose groups stay."),
];

/// The glossary window; drawn only while open (Help → Glossary opens it, its close button or
/// Escape closes it).
#[derive(Default)]
pub struct GlossaryView {
    pub open: bool,
}

impl View for GlossaryView {
    fn show(&mut self, _: &ViewCtx, ui: &mut egui::Ui) -> Vec<Command> {
        if self.open && ui.input(|i| i.key_pressed(egui::Key::Escape)) {
            self.open = false;
        }
        if self.open {
            egui::Window::new("Glossary").open(&mut self.open).default_width(520.0).default_pos([300.0, 120.0]).show(ui.ctx(), |ui| {
                egui::ScrollArea::vertical().max_height(560.0).show(ui, |ui| {
                    for (term, text) in ENTRIES {
                        ui.strong(*term);
                        ui.add(egui::Label::new(*text).wrap());
                        ui.add_space(4.0);
                    }
                });
            });
        }
        Vec::new()
    }
}
