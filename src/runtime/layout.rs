//! Layouts: shape, strides (in elements, never negative) and an element offset into a
//! buffer. Views (permute, swap_dims, slice with positive steps, expand, unfold, reshape of
//! contiguous data) change the layout only.
use burn_backend::Shape;

/// Shape, strides and offset of a tensor over its buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Size of each dimension.
    pub shape: Shape,
    /// Elements to skip to move one step along each dimension (0 for broadcast dimensions).
    pub strides: Vec<usize>,
    /// Position of the first element in the buffer, in elements.
    pub offset: usize,
}

impl Layout {
    /// The row-major contiguous layout of `shape`.
    pub fn contiguous(shape: Shape) -> Self {
        let strides = contiguous_strides(shape.as_slice());
        Self {
            shape,
            strides,
            offset: 0,
        }
    }

    /// Number of elements.
    pub fn num_elements(&self) -> usize {
        self.shape.num_elements()
    }

    /// Rank.
    pub fn rank(&self) -> usize {
        self.shape.num_dims()
    }

    /// Whether the elements are densely packed in row-major order from `offset` (size-1
    /// dimensions may have any stride).
    pub fn is_contiguous(&self) -> bool {
        if self.num_elements() == 0 {
            return true;
        }
        let mut expected = 1;
        for (&size, &stride) in self.shape.iter().zip(&self.strides).rev() {
            if size != 1 && stride != expected {
                return false;
            }
            expected *= size;
        }
        true
    }

    /// Whether the layout is contiguous and starts at the buffer's first element.
    pub fn is_contiguous_from_start(&self) -> bool {
        self.offset == 0 && self.is_contiguous()
    }

    /// Reorders the dimensions: dimension `i` of the result is dimension `axes[i]`.
    pub fn permute(&self, axes: &[usize]) -> Self {
        Self {
            shape: Shape::from(axes.iter().map(|&a| self.shape[a]).collect::<Vec<_>>()),
            strides: axes.iter().map(|&a| self.strides[a]).collect(),
            offset: self.offset,
        }
    }

    /// Swaps two dimensions.
    pub fn swap(&self, a: usize, b: usize) -> Self {
        let mut out = self.clone();
        out.shape.as_mut_slice().swap(a, b);
        out.strides.swap(a, b);
        out
    }

    /// The layout viewed with `shape`, which must broadcast from this one (numpy rules:
    /// missing leading dimensions and size-1 dimensions get stride 0). `None` if it doesn't.
    pub fn broadcast_to(&self, shape: &Shape) -> Option<Self> {
        let rank = shape.num_dims();
        if rank < self.rank() {
            return None;
        }
        let lead = rank - self.rank();
        let mut strides = vec![0; rank];
        for d in 0..rank {
            if d < lead {
                continue;
            }
            let (size, stride) = (self.shape[d - lead], self.strides[d - lead]);
            if size == shape[d] {
                strides[d] = stride;
            } else if size != 1 {
                return None;
            }
        }
        Some(Self {
            shape: shape.clone(),
            strides,
            offset: self.offset,
        })
    }

    /// Narrows dimension `dim` to `len` elements starting at `start`, every `step`-th one.
    pub fn narrow(&self, dim: usize, start: usize, len: usize, step: usize) -> Self {
        let mut out = self.clone();
        if len > 0 {
            out.offset += start * self.strides[dim];
        }
        out.shape.as_mut_slice()[dim] = len;
        out.strides[dim] *= step;
        out
    }

    /// Sliding windows of `size` elements every `step` along `dim`: `dim` becomes the window
    /// count and a new last dimension of `size` runs inside each window.
    pub fn unfold(&self, dim: usize, size: usize, step: usize) -> Self {
        let len = self.shape[dim];
        let windows = if len >= size { (len - size) / step + 1 } else { 0 };
        let mut shape = self.shape.to_vec();
        let mut strides = self.strides.clone();
        shape[dim] = windows;
        strides[dim] = self.strides[dim] * step;
        shape.push(size);
        strides.push(self.strides[dim]);
        Self {
            shape: Shape::from(shape),
            strides,
            offset: self.offset,
        }
    }

    /// The same contiguous data seen with another shape of equal size; `None` when the
    /// layout isn't contiguous.
    pub fn reshape(&self, shape: Shape) -> Option<Self> {
        if !self.is_contiguous() {
            return None;
        }
        let mut out = Self::contiguous(shape);
        out.offset = self.offset;
        Some(out)
    }

    /// Largest element index touched, plus one (0 for an empty layout).
    pub fn span(&self) -> usize {
        if self.num_elements() == 0 {
            return 0;
        }
        self.offset
            + self
                .shape
                .iter()
                .zip(&self.strides)
                .map(|(&n, &s)| (n - 1) * s)
                .sum::<usize>()
            + 1
    }
}

/// `shape` with size-1 dimensions dropped and adjacent dimensions merged wherever every view
/// (one stride list per view, all over `shape`) steps through them as through one: the same
/// elements in the same order, with fewer coordinates for kernels to work out. Two contiguous
/// views become rank 1; a rank-0 or one-element shape becomes rank 0.
pub fn coalesce(shape: &[usize], views: &[&[usize]]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut dims: Vec<usize> = Vec::with_capacity(shape.len());
    let mut strides: Vec<Vec<usize>> = vec![Vec::with_capacity(shape.len()); views.len()];
    for (d, &n) in shape.iter().enumerate().filter(|&(_, &n)| n != 1) {
        let merges = !dims.is_empty() && views.iter().zip(&strides).all(|(v, s)| s[s.len() - 1] == n * v[d]);
        if merges {
            *dims.last_mut().expect("a dimension") *= n;
        } else {
            dims.push(n);
        }
        for (v, s) in views.iter().zip(strides.iter_mut()) {
            if merges {
                *s.last_mut().expect("a dimension") = v[d];
            } else {
                s.push(v[d]);
            }
        }
    }
    (dims, strides)
}

/// Row-major strides of a shape.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1].max(1);
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_merges_what_every_view_steps_through_as_one() {
        // Two contiguous views: one dimension.
        assert_eq!(coalesce(&[2, 3, 4], &[&[12, 4, 1], &[12, 4, 1]]), (vec![24], vec![vec![1], vec![1]]));
        // The last dim of a cat region (row stride 8, 4 columns): rows stay apart in the
        // output, merge in the contiguous input; size-1 dims go.
        assert_eq!(
            coalesce(&[1, 5, 4], &[&[20, 4, 1], &[40, 8, 1]]),
            (vec![5, 4], vec![vec![4, 1], vec![8, 1]])
        );
        // A broadcast (stride 0) dimension merges only with another one.
        assert_eq!(coalesce(&[3, 2], &[&[0, 0]]), (vec![6], vec![vec![0]]));
        assert_eq!(coalesce(&[3, 2], &[&[2, 1], &[0, 1]]), (vec![3, 2], vec![vec![2, 1], vec![0, 1]]));
        assert_eq!(coalesce(&[1, 1], &[&[1, 1]]), (vec![], vec![vec![]]));
        assert_eq!(coalesce(&[], &[&[], &[]]), (vec![], vec![vec![], vec![]]));
    }

    #[test]
    fn views_keep_offsets_and_strides() {
        let l = Layout::contiguous(Shape::from(vec![2, 3, 4]));
        assert_eq!(l.strides, vec![12, 4, 1]);
        assert!(l.is_contiguous());
        let p = l.permute(&[2, 0, 1]);
        assert_eq!(p.shape.to_vec(), vec![4, 2, 3]);
        assert_eq!(p.strides, vec![1, 12, 4]);
        assert!(!p.is_contiguous());
        let n = l.narrow(2, 1, 2, 2);
        assert_eq!((n.offset, n.strides[2], n.shape[2]), (1, 2, 2));
        assert_eq!(n.span(), 1 + 12 + 8 + 2 + 1);
        let b = Layout::contiguous(Shape::from(vec![3, 1])).broadcast_to(&Shape::from(vec![2, 3, 5]));
        assert_eq!(b.unwrap().strides, vec![0, 1, 0]);
        assert!(Layout::contiguous(Shape::from(vec![3])).broadcast_to(&Shape::from(vec![4])).is_none());
        let u = Layout::contiguous(Shape::from(vec![2, 7])).unfold(1, 3, 2);
        assert_eq!(u.shape.to_vec(), vec![2, 3, 3]);
        assert_eq!(u.strides, vec![7, 2, 1]);
    }
}
