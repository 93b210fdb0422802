//! The typed-message pattern of the shard operations and the coordinators' calls: a
//! request struct knows its variant in the union that travels and the variant of the
//! union its reply comes back in. Only the channel sees the unions.

/// Implements `$trait` (with `type Reply`, `into_message` and `reply`) for each
/// `$request`: wrapped as `$union::$request`, its reply taken out of `$replies` by
/// `$pattern => $value` (`None` for any other reply).
#[macro_export]
macro_rules! typed_requests {
    ($trait:ident: $union:ident -> $replies:ident { $($request:ident => $reply:ty = $pattern:pat => $value:expr;)* }) => {$(
        impl $trait for $request {
            type Reply = $reply;
            fn into_message(self) -> $union {
                $union::$request(self)
            }
            fn reply(reply: $replies) -> Option<$reply> {
                match reply {
                    $pattern => Some($value),
                    _ => None,
                }
            }
        }
    )*};
}
