//! What the views paint with: the group colours (`palette`, shared with the SVG exports) and the
//! busy indicator (`busy`).

pub mod busy;
pub mod palette;
