//! What the views paint with: the group colours (`palette`, shared with the SVG exports), the
//! busy indicator (`busy`), the charts' reference lines (`reference`), the fallback fonts for
//! CJK and other scripts (`fonts`) and the text a token shows (`token_text`).

pub mod busy;
pub mod fonts;
pub mod palette;
pub mod reference;
pub mod token_text;
