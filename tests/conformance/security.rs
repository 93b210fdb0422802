//! Samples for the SASL and SCRAM credential APIs, for `exercise`. The fixture's
//! broker listens on PLAINTEXT only, where SaslHandshake and SaslAuthenticate get
//! ILLEGAL_SASL_STATE as from a Java broker (tests/security.rs covers SASL listeners).

use super::*;

pub fn exercise(c: &mut Conformance, key: ApiKey, v: i16) -> bool {
    match key {
        ApiKey::SaslHandshake => {
            let request = SaslHandshakeRequest::default().with_mechanism(s("PLAIN"));
            if let Some(response) = c.call(request, v) {
                if response.error_code != 34 {
                    c.failures.push(format!("SaslHandshake v{v} on PLAINTEXT: {response:?}"));
                }
            }
        }
        ApiKey::SaslAuthenticate => {
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"\0user\0password"));
            if let Some(response) = c.call(request, v) {
                if response.error_code != 34 {
                    c.failures.push(format!("SaslAuthenticate v{v} on PLAINTEXT: {response:?}"));
                }
            }
        }
        ApiKey::AlterUserScramCredentials => {
            use alter_user_scram_credentials_request::{ScramCredentialDeletion, ScramCredentialUpsertion};
            let upsert = |name: &str, iterations: i32| {
                ScramCredentialUpsertion::default()
                    .with_name(s(name))
                    .with_mechanism(1)
                    .with_iterations(iterations)
                    .with_salt(Bytes::from_static(b"conformance-salt"))
                    .with_salted_password(Bytes::from(vec![7u8; 32]))
            };
            let request = AlterUserScramCredentialsRequest::default()
                .with_upsertions(vec![upsert("conf-user", 4096), upsert("conf-weak", 10)])
                .with_deletions(vec![ScramCredentialDeletion::default().with_name(s("conf-nobody")).with_mechanism(2)]);
            if let Some(response) = c.call(request, v) {
                let code = |user: &str| response.results.iter().find(|r| r.user.as_str() == user).map(|r| r.error_code);
                let want = [("conf-user", Some(0)), ("conf-weak", Some(93)), ("conf-nobody", Some(91))];
                if want.iter().any(|(user, code_wanted)| code(user) != *code_wanted) {
                    c.failures.push(format!("AlterUserScramCredentials v{v}: {response:?}"));
                }
            }
            // The same user and mechanism twice in one request: DUPLICATE_RESOURCE.
            let twice = AlterUserScramCredentialsRequest::default()
                .with_upsertions(vec![upsert("conf-twice", 4096), upsert("conf-twice", 8192)]);
            if let Some(response) = c.call(twice, v) {
                if response.results.iter().map(|r| r.error_code).collect::<Vec<_>>() != [92] {
                    c.failures.push(format!("AlterUserScramCredentials v{v} twice: {response:?}"));
                }
            }
        }
        ApiKey::DescribeUserScramCredentials => {
            let all = c.call(DescribeUserScramCredentialsRequest::default(), v);
            if all.is_some_and(|r| r.error_code != 0) {
                c.failures.push(format!("DescribeUserScramCredentials v{v}: all users refused"));
            }
            let unknown = DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
                describe_user_scram_credentials_request::UserName::default().with_name(s("conf-unknown-user")),
            ]));
            if let Some(response) = c.call(unknown, v) {
                if response.results.first().map(|r| r.error_code) != Some(91) {
                    c.failures.push(format!("DescribeUserScramCredentials v{v}: {response:?}"));
                }
            }
        }
        // The fixture has no authorizer: as from a Java broker without one, the ACL
        // APIs answer SECURITY_DISABLED (tests/acls.rs covers them with one).
        ApiKey::CreateAcls => {
            let creation = create_acls_request::AclCreation::default()
                .with_resource_type(2)
                .with_resource_name(s("conf"))
                .with_resource_pattern_type(3)
                .with_principal(s("User:alice"))
                .with_host(s("*"))
                .with_operation(3)
                .with_permission_type(3);
            if let Some(response) = c.call(CreateAclsRequest::default().with_creations(vec![creation]), v) {
                if response.results.iter().map(|r| r.error_code).collect::<Vec<_>>() != [54] {
                    c.failures.push(format!("CreateAcls v{v}: {response:?}"));
                }
            }
        }
        ApiKey::DescribeAcls => {
            let request = DescribeAclsRequest::default()
                .with_resource_type_filter(2)
                .with_resource_name_filter(Some(s("conf")))
                .with_pattern_type_filter(2)
                .with_principal_filter(None)
                .with_host_filter(None)
                .with_operation(1)
                .with_permission_type(1);
            if c.call(request, v).is_some_and(|r| r.error_code != 54) {
                c.failures.push(format!("DescribeAcls v{v}: not SECURITY_DISABLED"));
            }
        }
        ApiKey::DeleteAcls => {
            let filter = delete_acls_request::DeleteAclsFilter::default()
                .with_resource_type_filter(1)
                .with_resource_name_filter(None)
                .with_pattern_type_filter(1)
                .with_principal_filter(Some(s("User:alice")))
                .with_host_filter(None)
                .with_operation(1)
                .with_permission_type(1);
            if let Some(response) = c.call(DeleteAclsRequest::default().with_filters(vec![filter]), v) {
                if response.filter_results.iter().map(|r| r.error_code).collect::<Vec<_>>() != [54] {
                    c.failures.push(format!("DeleteAcls v{v}: {response:?}"));
                }
            }
        }
        ApiKey::AlterClientQuotas => {
            use alter_client_quotas_request::{EntityData, EntryData, OpData};
            let entity = |kind: &str, name: Option<&str>| {
                EntityData::default().with_entity_type(s(kind)).with_entity_name(name.map(s))
            };
            let set = |key: &str, value: f64| OpData::default().with_key(s(key)).with_value(value);
            let good = EntryData::default()
                .with_entity(vec![entity("user", Some("conf-user")), entity("client-id", None)])
                .with_ops(vec![set("producer_byte_rate", 1e9), set("request_percentage", 500.0)]);
            let request = AlterClientQuotasRequest::default().with_entries(vec![good]);
            if let Some(response) = c.call(request, v) {
                if response.entries.iter().map(|e| e.error_code).collect::<Vec<_>>() != [0] {
                    c.failures.push(format!("AlterClientQuotas v{v}: {response:?}"));
                }
            }
            // An unknown key: INVALID_REQUEST, and nothing changes.
            let bad = EntryData::default()
                .with_entity(vec![entity("ip", Some("10.1.2.3"))])
                .with_ops(vec![set("producer_byte_rate", 5.0)]);
            let request = AlterClientQuotasRequest::default().with_entries(vec![bad]).with_validate_only(true);
            if let Some(response) = c.call(request, v) {
                if response.entries.iter().map(|e| e.error_code).collect::<Vec<_>>() != [42] {
                    c.failures.push(format!("AlterClientQuotas v{v} bad key: {response:?}"));
                }
            }
        }
        ApiKey::DescribeClientQuotas => {
            use describe_client_quotas_request::ComponentData;
            // The quota to describe (AlterClientQuotas' own samples come later).
            {
                use alter_client_quotas_request::{EntityData, EntryData, OpData};
                let entity = [
                    EntityData::default().with_entity_type(s("user")).with_entity_name(Some(s("conf-user"))),
                    EntityData::default().with_entity_type(s("client-id")).with_entity_name(None),
                ];
                let ops = ["producer_byte_rate", "request_percentage"]
                    .map(|k| OpData::default().with_key(s(k)).with_value(1e6));
                let entry = EntryData::default().with_entity(entity.to_vec()).with_ops(ops.to_vec());
                c.call(AlterClientQuotasRequest::default().with_entries(vec![entry]), 1);
            }
            let component = ComponentData::default().with_entity_type(s("user")).with_match_type(0);
            let request = DescribeClientQuotasRequest::default()
                .with_components(vec![component.with_match(Some(s("conf-user")))])
                .with_strict(false);
            if let Some(response) = c.call(request, v) {
                let entries = response.entries.as_deref().unwrap_or_default();
                if response.error_code != 0 || entries.len() != 1 || entries[0].values.len() != 2 {
                    c.failures.push(format!("DescribeClientQuotas v{v}: {response:?}"));
                }
            }
        }
        ApiKey::UpdateFeatures => {
            use update_features_request::FeatureUpdateKey;
            let update = |name: &str, level: i16, kind: i8| {
                FeatureUpdateKey::default()
                    .with_feature(s(name))
                    .with_max_version_level(level)
                    .with_allow_downgrade(kind != 1 && v == 0)
                    .with_upgrade_type(if v == 0 { 1 } else { kind })
            };
            // Setting the level a feature has already is allowed (and changes nothing).
            let same = UpdateFeaturesRequest::default().with_feature_updates(vec![update("share.version", 2, 1)]);
            if let Some(response) = c.call(same, v) {
                let per_feature = response.results.iter().map(|r| r.error_code).collect::<Vec<_>>();
                if response.error_code != 0 || (v < 2 && per_feature != [0]) {
                    c.failures.push(format!("UpdateFeatures v{v} same level: {response:?}"));
                }
            }
            // Past what this broker supports: INVALID_UPDATE_VERSION, nothing changed.
            let past = UpdateFeaturesRequest::default().with_feature_updates(vec![update("share.version", 9, 1)]);
            if let Some(response) = c.call(past.with_validate_only(v >= 1), v) {
                let per_feature = response.results.iter().map(|r| r.error_code).collect::<Vec<_>>();
                if response.error_code != 95 || (v < 2 && per_feature != [95]) {
                    c.failures.push(format!("UpdateFeatures v{v} past the supported levels: {response:?}"));
                }
            }
            if v >= 1 {
                let down = UpdateFeaturesRequest::default().with_feature_updates(vec![update("group.version", 0, 2)]);
                if let Some(response) = c.call(down.with_validate_only(true), v) {
                    if response.error_code != 0 {
                        c.failures.push(format!("UpdateFeatures v{v} validated safe downgrade: {response:?}"));
                    }
                }
            }
        }
        _ => return super::shares::exercise(c, key, v),
    }
    true
}
