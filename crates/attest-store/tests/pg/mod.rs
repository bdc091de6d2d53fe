//! A fresh PostgreSQL database per test, dropped when the test ends.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The server tests create their databases on.
pub fn admin_url() -> String {
    std::env::var("ATTEST_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

pub struct TestDb {
    pub url: String,
    name: String,
}

impl TestDb {
    pub fn new() -> TestDb {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "attest_test_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        );
        let admin = admin_url();
        let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap_or_else(|e| {
            panic!("PostgreSQL at {admin} (set ATTEST_TEST_POSTGRES; .ci/run starts it): {e}")
        });
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
        TestDb {
            url: format!("{base}/{name}"),
            name,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&admin_url(), postgres::NoTls) {
            let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}
