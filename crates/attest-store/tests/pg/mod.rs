//! A fresh PostgreSQL database per test, dropped when the test ends.
//! (The blocking client cannot run inside an async test's runtime, so
//! each admin statement runs on a thread of its own.)

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
        admin_sql(format!("CREATE DATABASE {name}"));
        let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
        TestDb {
            url: format!("{base}/{name}"),
            name,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            if let Ok(mut client) = postgres::Client::connect(&admin_url(), postgres::NoTls) {
                let _ =
                    client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
            }
        })
        .join();
    }
}

/// Run one statement on the admin database, off any async runtime.
fn admin_sql(sql: String) {
    std::thread::spawn(move || {
        let admin = admin_url();
        let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap_or_else(|e| {
            panic!("PostgreSQL at {admin} (set ATTEST_TEST_POSTGRES; .ci/run starts it): {e}")
        });
        client.batch_execute(&sql).unwrap();
    })
    .join()
    .unwrap();
}
