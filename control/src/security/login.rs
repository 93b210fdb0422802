//! The client side of SASL, as Kafka's `SaslClientAuthenticator` runs it, without I/O:
//! the tokens a client sends in SaslAuthenticate for PLAIN and SCRAM-SHA-256/512, and
//! the check of the server's SCRAM signature (so a client knows it talked to a server
//! that holds its credential, not one that merely accepted it). Used by brokers
//! reaching each other on a SASL inter-broker listener and by the CLI's client.

use super::scram::{self, ScramMechanism};

/// A mechanism a client can log in with (OAUTHBEARER needs a token source, which no
/// Skein client has).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginMechanism {
    Plain,
    Scram(ScramMechanism),
}

impl LoginMechanism {
    pub fn parse(name: &str) -> Option<LoginMechanism> {
        match name.to_ascii_uppercase().as_str() {
            "PLAIN" => Some(LoginMechanism::Plain),
            other => ScramMechanism::parse(other).map(LoginMechanism::Scram),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LoginMechanism::Plain => "PLAIN",
            LoginMechanism::Scram(m) => m.name(),
        }
    }
}

/// Who a client logs in as.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    pub mechanism: LoginMechanism,
    pub user: String,
    pub password: String,
}

/// Names the user, never the password.
impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login").field("mechanism", &self.mechanism).field("user", &self.user).finish_non_exhaustive()
    }
}

/// One login in progress: `first` gives the first token, `answer` each next one.
#[derive(Debug)]
pub struct LoginExchange<'a> {
    login: &'a Login,
    state: State,
}

#[derive(Debug)]
enum State {
    Start,
    /// PLAIN's one token is out.
    PlainSent,
    /// SCRAM's client-first is out, with its bare part.
    ScramFirstSent {
        mechanism: ScramMechanism,
        bare: String,
    },
    /// SCRAM's client-final is out; the server-final must carry this signature.
    ScramFinalSent {
        server_signature: Vec<u8>,
    },
    Done,
}

impl<'a> LoginExchange<'a> {
    pub fn new(login: &'a Login) -> LoginExchange<'a> {
        LoginExchange { login, state: State::Start }
    }

    /// The first token.
    pub fn first(&mut self) -> Vec<u8> {
        assert!(matches!(self.state, State::Start), "a login's first token is sent once");
        let Login { user, password, .. } = self.login;
        match self.login.mechanism {
            LoginMechanism::Plain => {
                self.state = State::PlainSent;
                format!("\0{user}\0{password}").into_bytes()
            }
            LoginMechanism::Scram(mechanism) => {
                let nonce: String = scram::random_secret().iter().map(|b| format!("{b:02x}")).collect();
                let escaped = user.replace('=', "=3D").replace(',', "=2C");
                let bare = format!("n={escaped},r={nonce}");
                let first = format!("n,,{bare}").into_bytes();
                self.state = State::ScramFirstSent { mechanism, bare };
                first
            }
        }
    }

    /// Takes the server's answer to the last token: the next token to send, or `None`
    /// once the login is complete.
    ///
    /// # Errors
    /// A server message that does not parse, or a SCRAM server signature that does
    /// not verify (the server does not hold this user's credential).
    pub fn answer(&mut self, server: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::PlainSent => Ok(None),
            State::ScramFirstSent { mechanism, bare } => {
                let server_first = std::str::from_utf8(server).map_err(|_| "the server-first is not UTF-8")?;
                let (client_final, server_signature) =
                    scram::client_reply(mechanism, &self.login.password, &bare, server_first)?;
                self.state = State::ScramFinalSent { server_signature };
                Ok(Some(client_final.into_bytes()))
            }
            State::ScramFinalSent { server_signature } => {
                let engine = base64::engine::general_purpose::STANDARD;
                let want = format!("v={}", base64::Engine::encode(&engine, server_signature));
                match server == want.as_bytes() {
                    true => Ok(None),
                    false => {
                        Err("the server's SCRAM signature does not verify: it does not hold this user's credential"
                            .into())
                    }
                }
            }
            State::Start | State::Done => Err("no token is waiting for an answer".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::scram::{Exchange, ScramCredential, Step};
    use super::*;

    fn login(mechanism: LoginMechanism, password: &str) -> Login {
        Login { mechanism, user: "broker,1".into(), password: password.into() }
    }

    // PLAIN is one token with the user and password, done at the server's answer.
    #[test]
    fn plain_is_one_token() {
        let login = login(LoginMechanism::Plain, "pw");
        let mut exchange = LoginExchange::new(&login);
        assert_eq!(exchange.first(), b"\0broker,1\0pw");
        assert_eq!(exchange.answer(b""), Ok(None));
    }

    // A SCRAM login against the server's side of the exchange: authenticated with the
    // right password and a verified server signature; a server that lacks the
    // credential (a forged server-final) is refused by the client.
    #[test]
    fn scram_against_the_server() {
        let mechanism = ScramMechanism::Sha512;
        let stored = ScramCredential::from_password(mechanism, "pw", b"salt", 4096);
        let run = |password: &str, forge: bool| -> Result<Option<Vec<u8>>, String> {
            let login = login(LoginMechanism::Scram(mechanism), password);
            let mut client = LoginExchange::new(&login);
            let mut server = Exchange::Start;
            let first = client.first();
            let Ok(Step::Continue(server_first)) = server.step(mechanism, &first, |_, _| Some(stored.clone()), b"k")
            else {
                panic!("no server-first")
            };
            let client_final = client.answer(&server_first)?.expect("a client-final");
            match server.step(mechanism, &client_final, |_, _| None, b"k") {
                Ok(Step::Authenticated { user, server_final, .. }) => {
                    assert_eq!(user, "broker,1");
                    client.answer(if forge { b"v=AAAA" } else { &server_final })
                }
                other => Err(format!("{other:?}")),
            }
        };
        assert_eq!(run("pw", false), Ok(None));
        assert!(run("pw", true).unwrap_err().contains("does not verify"));
        assert!(run("wrong", false).is_err());
    }

    // Mechanism names parse as Kafka's, whatever their case; OAUTHBEARER and GSSAPI
    // have no client here.
    #[test]
    fn mechanism_names() {
        assert_eq!(LoginMechanism::parse("scram-sha-256"), Some(LoginMechanism::Scram(ScramMechanism::Sha256)));
        assert_eq!(LoginMechanism::parse("PLAIN").map(LoginMechanism::name), Some("PLAIN"));
        assert_eq!(LoginMechanism::parse("OAUTHBEARER"), None);
        assert_eq!(LoginMechanism::parse("GSSAPI"), None);
    }
}
