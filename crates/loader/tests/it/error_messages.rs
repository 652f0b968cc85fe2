//! A refusal names the setting that changes it: the URL policy's switch, the accepted formats,
//! the pixel limit, the download cap and the budgets. Real loads against a local origin where a
//! load can reach the refusal; the busy errors (a budget full for the whole wait) directly.

use std::time::Duration;

use mmcache_loader::{DecodeError, Error, ImageFormats, Loader, LoaderBuilder, OriginError, env};
use mmcache_test_support::images;
use mmcache_test_support::origin::{Route, TestOrigin};

/// A 1x1 GIF: a format Dynamo's loader does not open.
const GIF: &str = "data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7";

/// The error of loading `url` with `builder`'s loader.
async fn refusal(builder: LoaderBuilder, url: &str) -> Error {
    builder.build().unwrap().load(url, None).await.unwrap_err()
}

/// `err` names `variable`, in its message and as its setting.
fn names(err: &Error, variable: &str) {
    let message = err.to_string();
    assert!(
        message.contains(variable),
        "`{message}` does not name {variable}"
    );
    assert_eq!(err.setting(), Some(variable), "{message}");
}

#[tokio::test]
async fn refusals_name_the_setting_that_changes_them() {
    let origin = TestOrigin::start();
    origin.set("/big.png", Route::ok(images::noise_png(300, 300, 1)));
    origin.set("/cat.png", Route::ok(images::png(64, 64, 2)));
    let big = origin.url("/big.png");
    let cat = origin.url("/cat.png");

    // The default policy: https only, no internal addresses.
    let strict = Loader::builder().build().unwrap();
    let http = strict.load(&cat, None).await.unwrap_err();
    assert!(http.is_policy(), "{http}");
    names(&http, env::ALLOW_INTERNAL);
    let https_loopback = cat.replace("http://", "https://");
    let internal = strict.load(&https_loopback, None).await.unwrap_err();
    assert_eq!(internal.http_status(), 403, "{internal}");
    names(&internal, env::ALLOW_INTERNAL);
    let domains = Loader::builder()
        .allowed_media_domains(["images.example.com"])
        .build()
        .unwrap();
    let err = domains
        .load("https://other.example.com/a.png", None)
        .await
        .unwrap_err();
    names(&err, env::ALLOWED_MEDIA_DOMAINS);

    let local = || Loader::builder().allow_internal(true);
    let err = refusal(local().image_formats(ImageFormats::DYNAMO), GIF).await;
    assert_eq!(err.http_status(), 415, "{err}");
    names(&err, env::IMAGE_FORMATS);

    let err = refusal(local().max_pixels(1000), &cat).await;
    assert!(
        matches!(err, Error::Decode(DecodeError::TooManyPixels { .. })),
        "{err}"
    );
    names(&err, env::MAX_PIXELS);

    let err = refusal(local().max_file_size_bytes(1000), &big).await;
    assert!(
        matches!(err, Error::Origin(OriginError::TooLarge { .. })),
        "{err}"
    );
    names(&err, env::MAX_FILE_SIZE_MB);
    let err = refusal(local().max_file_size_bytes(10), GIF).await;
    names(&err, env::MAX_FILE_SIZE_MB);

    let err = refusal(local().download_memory_bytes(64 << 10), &big).await;
    assert!(
        matches!(err, Error::Origin(OriginError::OverDownloadBudget { .. })),
        "{err}"
    );
    names(&err, env::DOWNLOAD_MEMORY_BYTES);

    let err = refusal(local().decode_memory_bytes(10_000), &cat).await;
    assert!(matches!(err, Error::OverDecodeBudget { .. }), "{err}");
    names(&err, env::DECODE_MEMORY_BYTES);
}

#[test]
fn busy_budgets_and_the_deadline_name_their_settings() {
    let waited = Duration::from_secs(30);
    let decode = Error::DecodeBusy { waited };
    names(&decode, env::DECODE_WAIT_SECS);
    assert!(
        decode.to_string().contains(env::DECODE_MEMORY_BYTES),
        "{decode}"
    );
    let download = Error::Origin(OriginError::DownloadBusy { waited });
    names(&download, env::DECODE_WAIT_SECS);
    assert!(
        download.to_string().contains(env::DOWNLOAD_MEMORY_BYTES),
        "{download}"
    );
    names(
        &Error::LoadTimeout { after: waited },
        env::LOAD_TIMEOUT_SECS,
    );
    // A failure no setting changes says nothing more.
    let status = Error::Origin(OriginError::Status(404));
    assert_eq!(status.setting(), None);
    assert_eq!(status.to_string(), "origin returned HTTP 404");
}
