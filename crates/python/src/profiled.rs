//! A loader's loads in one decode profile: what the engine integrations (`mmcache.vllm`,
//! `mmcache.sglang`) load through, each profile its own entries in the decoded cache.

use bytes::Bytes;
use mmcache_loader::{ColorPolicy, DecodeProfile, Fallback, Loaded, Orientation, PixelLayout};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3_async_runtimes::generic::future_into_py;

use crate::runtime::{self, PerProcess};
use crate::{errors, pixels};

/// `loader._profiled(...)`: the loader's loads in one decode profile. Every method gives the
/// pixels' owner (`Pixels`); `load` and `load_sync` with the tier that served them.
#[pyclass(frozen, module = "mmcache._native")]
pub(crate) struct ProfiledLoader {
    loader: mmcache_loader::Loader,
    profile: DecodeProfile,
    pid: u32,
}

/// The profile named by `_profiled`'s arguments.
pub(crate) fn profile_of(
    color: &str,
    background: Option<(u8, u8, u8)>,
    exif_orientation: bool,
    keep_source: bool,
    fallback: bool,
) -> PyResult<DecodeProfile> {
    let color = match (color, background) {
        ("rgb", None) => ColorPolicy::Rgb,
        ("rgb", Some((r, g, b))) => ColorPolicy::RgbOver {
            background: [r, g, b],
        },
        ("original", None) => ColorPolicy::Original,
        ("encoded", None) => ColorPolicy::Encoded,
        _ => {
            return Err(PyValueError::new_err(format!(
                "no decode profile {color:?} with background {background:?} (`rgb`, `original` \
                 or `encoded`; a background only with `rgb`)"
            )));
        }
    };
    let mut profile = DecodeProfile::rgb(PixelLayout::Rgbx);
    profile.color = color;
    profile.orientation = if exif_orientation {
        Orientation::Exif
    } else {
        Orientation::AsStored
    };
    profile.keep_source = keep_source;
    profile.fallback = if fallback {
        Fallback::Caller
    } else {
        Fallback::Error
    };
    Ok(profile)
}

impl ProfiledLoader {
    pub(crate) fn new(loader: mmcache_loader::Loader, profile: DecodeProfile, pid: u32) -> Self {
        Self {
            loader,
            profile,
            pid,
        }
    }

    fn start(&self) -> PyResult<mmcache_loader::Loader> {
        runtime::check_owner(self.pid)?;
        runtime::get()?;
        Ok(self.loader.clone())
    }
}

/// A load's outcome as `(Pixels, source)`, or its error.
struct Got {
    result: mmcache_loader::Result<Loaded>,
    url: String,
}

impl<'py> IntoPyObject<'py> for Got {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.result {
            Ok(loaded) => {
                let owner = pixels::owner(py, loaded.image)?;
                (owner, loaded.source.as_str())
                    .into_pyobject(py)
                    .map(Bound::into_any)
            }
            Err(e) => Err(errors::load_error(py, &e, &self.url)),
        }
    }
}

/// A decode's outcome as `Pixels`, or its error.
struct Decoded(mmcache_loader::Result<std::sync::Arc<mmcache_loader::Image>>);

impl<'py> IntoPyObject<'py> for Decoded {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.0 {
            Ok(image) => pixels::owner(py, image).map(Bound::into_any),
            Err(e) => Err(errors::load_error(py, &e, "")),
        }
    }
}

#[pymethods]
impl ProfiledLoader {
    /// The decoded cache's pixels of `url` in this profile, at once, or `None` (a miss, a
    /// `data:` URL, no usable scope in scoped mode). Counted as a memory hit.
    #[pyo3(signature = (url, scope=None))]
    fn cached<'py>(
        &self,
        py: Python<'py>,
        url: &str,
        scope: Option<&str>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        runtime::check_owner(self.pid)?;
        let scope = scope.and_then(mmcache_loader::Scope::new);
        self.loader
            .load_cached_as(url, scope.as_ref(), &self.profile)
            .map(|image| pixels::owner(py, image).map(Bound::into_any))
            .transpose()
    }

    /// `await profiled.load(url, scope=None)`: `(Pixels, source)` through every tier.
    #[pyo3(signature = (url, scope=None))]
    fn load<'py>(
        &self,
        py: Python<'py>,
        url: String,
        scope: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (loader, profile) = (self.start()?, self.profile);
        let scope = scope.and_then(mmcache_loader::Scope::new);
        future_into_py::<PerProcess, _, _>(py, async move {
            let result = loader.load_as(&url, scope.as_ref(), &profile).await;
            Ok(Got { result, url })
        })
    }

    /// The blocking form of `load`, for threads without an event loop (SGLang's loader
    /// pool): the GIL is released while it waits and decodes.
    #[pyo3(signature = (url, scope=None))]
    fn load_sync<'py>(
        &self,
        py: Python<'py>,
        url: String,
        scope: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Some(hit) = self.cached(py, &url, scope)? {
            return (hit, "memory").into_pyobject(py).map(Bound::into_any);
        }
        let (loader, rt) = (self.start()?, runtime::get()?);
        let scope = scope.and_then(mmcache_loader::Scope::new);
        let profile = self.profile;
        let result = py.detach(|| rt.block_on(loader.load_as(&url, scope.as_ref(), &profile)));
        Got { result, url }.into_pyobject(py)
    }

    /// `Pixels` of the encoded `data`, decoded in this profile within the decode budget and
    /// the download cap, cached nowhere (a `data:` URL's payload, a local file). Blocks
    /// without the GIL.
    fn decode<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyBytes>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (loader, rt) = (self.start()?, runtime::get()?);
        let bytes = Bytes::copy_from_slice(data.as_bytes());
        let profile = self.profile;
        Decoded(py.detach(|| rt.block_on(loader.decode_as(bytes, &profile)))).into_pyobject(py)
    }

    /// The profile's colour policy: `"rgb"`, `"rgb_over"`, `"original"` or `"encoded"`.
    #[getter]
    fn color(&self) -> &'static str {
        self.profile.color_name()
    }

    fn __repr__(&self) -> String {
        format!("<mmcache ProfiledLoader {:?}>", self.profile)
    }
}
