//! What the views paint with: the group colours (`palette`, shared with the SVG exports), the
//! busy indicator (`busy`) and the charts' reference lines (`reference`).

pub mod busy;
pub mod palette;
pub mod reference;
